"""The docs say what the code does: generated parts are current, every name exists."""

import re
from pathlib import Path

from spark_jobs.cli import build_parser
from spark_jobs.config import Settings
from spark_jobs.contracts import tables
from spark_jobs.jobs.registry import JOBS

DOCS = Path(__file__).resolve().parent.parent / "docs"
README = (DOCS.parent / "README.md").read_text()


def test_tables_page_is_generated_from_the_table_specs():
    assert (DOCS / "tables.md").read_text() == tables.markdown()


def test_every_setting_is_documented():
    text = (DOCS / "configuration.md").read_text()
    missing = [name for name in Settings.model_fields if name != "source_file" and f"`{name}`" not in text]
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
