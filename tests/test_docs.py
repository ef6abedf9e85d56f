"""The docs say what the code does: generated parts are current, every name exists."""

import re
from pathlib import Path

from spark_jobs.cli import build_parser
from spark_jobs.config import FLAT_NAMES
from spark_jobs.jobs.registry import ALL_JOBS as JOBS
from spark_jobs.ops import table_docs

DOCS = Path(__file__).resolve().parent.parent / "docs"
README = (DOCS.parent / "README.md").read_text()


def test_tables_page_is_generated_from_the_table_specs():
    assert (DOCS / "tables.md").read_text() == table_docs.markdown()


def test_every_setting_is_documented():
    text = (DOCS / "configuration.md").read_text()
    missing = [name for name in FLAT_NAMES if f"`{name}`" not in text]
    assert missing == []


def test_every_job_has_a_page():
    assert sorted(p.stem for p in (DOCS / "jobs").glob("*.md")) == sorted(JOBS)


def test_readme_commands_exist():
    commands = set(build_parser()._subparsers._group_actions[0].choices)
    named = set(re.findall(r"`sigflow (\w[\w-]*)", README))
    assert named and named <= commands


def test_links_in_docs_resolve():
    for page in [DOCS.parent / "README.md", *DOCS.rglob("*.md")]:
        for target in re.findall(r"\]\(([^)#]+\.md)\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_the_list_of_proofs_names_every_test_file_and_only_tests_that_exist():
    """docs/testing.md says which test proves what: a test file it does not cover, or a test
    it names that is gone, is a proof added or cut without saying so."""
    text = (DOCS / "testing.md").read_text()
    tests_dir = DOCS.parent / "tests"
    named_paths = set(re.findall(r"`(tests/[\w/]*?(?:\.py|/))`", text))
    missing_paths = [p for p in named_paths if not (DOCS.parent / p).exists()]
    assert missing_paths == []
    files = {str(p.relative_to(DOCS.parent)) for p in tests_dir.rglob("test_*.py")}
    uncovered = [f for f in files if not any(f == p or (p.endswith("/") and f.startswith(p)) for p in named_paths)]
    assert sorted(uncovered) == []
    defined = {name for f in tests_dir.rglob("test_*.py") for name in re.findall(r"^def (test_\w+)", f.read_text(), re.M)}
    assert sorted(set(re.findall(r"`(test_\w+)`", text)) - defined) == []


def _layout_modules(readme: str) -> set[str]:
    """The modules the README's layout block names: each `name/` line opens a package at its
    indent, each `name.py` line is a module of the package it is indented under."""
    block = readme[readme.index("```\nspark_jobs/"):]
    block = block[4:block.index("```", 4)]
    named, packages = set(), []
    for line in block.splitlines():
        depth = (len(line) - len(line.lstrip(" "))) // 2
        token = line.split()[0] if line.strip() else ""
        if token.endswith("/"):
            packages[depth:] = [token]
        elif token.endswith(".py"):
            named.add("".join(packages[:depth]) + token)
    return named


def test_the_readme_layout_names_every_module_and_only_those_that_exist():
    root = DOCS.parent
    modules = {str(path.relative_to(root)) for folder in ("spark_jobs", "dags")
               for path in (root / folder).rglob("*.py") if path.name != "__init__.py"}
    assert _layout_modules(README) == modules
