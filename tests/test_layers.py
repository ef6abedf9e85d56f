"""Layers point one way: dags -> cli -> ops -> local -> runtime -> jobs -> contracts -> config
(errors beside config). A module may import its own layer and the ones after it, never one
before it, at the top of the file or inside a function."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["dags", "cli", "ops", "local", "runtime", "jobs", "contracts", "config"]


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "dags":
        return "dags"
    if parts[0] != "spark_jobs" or len(parts) == 1:
        return None
    name = "config" if parts[1] == "errors" else parts[1]
    return name if name in LAYERS else None


def imported_modules(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:  # `from spark_jobs import ops` names a package
                yield node.lineno, f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name


def sources():
    return sorted([*ROOT.joinpath("spark_jobs").rglob("*.py"), *ROOT.joinpath("dags").rglob("*.py")])


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def upward_imports(module: str, source: str) -> list[str]:
    own = layer_of(module)
    if own is None:
        return []
    return [f"{module}:{line} imports {name} ({layer_of(name)} is above {own})"
            for line, name in imported_modules(ast.parse(source))
            if layer_of(name) and LAYERS.index(layer_of(name)) < LAYERS.index(own)]


def test_every_layer_has_modules():
    found = {layer_of(module_name(path)) for path in sources()}
    assert set(LAYERS) <= found


def test_no_module_imports_a_layer_above_its_own():
    assert [found for path in sources() for found in upward_imports(module_name(path), path.read_text())] == []


def test_an_upward_import_is_found_even_inside_a_function():
    source = "import json\nfrom spark_jobs.config import Settings\n\ndef f():\n    from spark_jobs.local import broker\n"
    assert upward_imports("spark_jobs.runtime.probe", source) == [
        "spark_jobs.runtime.probe:5 imports spark_jobs.local (local is above runtime)",
        "spark_jobs.runtime.probe:5 imports spark_jobs.local.broker (local is above runtime)",
    ]
