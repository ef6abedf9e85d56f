"""Layers point one way: dags -> airflow -> cli -> ops -> install -> runtime -> jobs -> contracts -> config
(errors beside config). A module may import its own layer and the ones after it, never one
before it, at the top of the file or inside a function.

``local`` (the one-machine stand-ins: embedded broker, cluster, PostgreSQL, Airflow) is a side
wing beside runtime: it may import runtime and what runtime may, and of sigflow's own code only
the CLI imports it (tests do too). Production code never does."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["dags", "airflow", "cli", "ops", "install", "runtime", "jobs", "contracts", "config"]
SIDE_WING = "local"
# where the side wing sits for its own imports, and who may import it
SIDE_WING_BESIDE = "runtime"
SIDE_WING_USERS = {"cli", SIDE_WING}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "dags":
        return "dags"
    if parts[0] != "spark_jobs" or len(parts) == 1:
        return None
    name = "config" if parts[1] == "errors" else parts[1]
    return name if name in LAYERS or name == SIDE_WING else None


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


def rank(layer: str) -> int:
    return LAYERS.index(SIDE_WING_BESIDE if layer == SIDE_WING else layer)


def upward_imports(module: str, source: str) -> list[str]:
    own = layer_of(module)
    if own is None:
        return []
    found = []
    for line, name in imported_modules(ast.parse(source)):
        target = layer_of(name)
        if target is None or target == own:
            continue
        if target == SIDE_WING and own not in SIDE_WING_USERS:
            found.append(f"{module}:{line} imports {name} ({SIDE_WING} is the one-machine side wing)")
        elif target != SIDE_WING and rank(target) < rank(own):
            found.append(f"{module}:{line} imports {name} ({target} is above {own})")
    return found


def test_every_layer_has_modules():
    found = {layer_of(module_name(path)) for path in sources()}
    assert set(LAYERS) | {SIDE_WING} <= found


def test_no_module_imports_a_layer_above_its_own():
    assert [found for path in sources() for found in upward_imports(module_name(path), path.read_text())] == []


def test_an_upward_import_is_found_even_inside_a_function():
    source = "import json\nfrom spark_jobs.config import Settings\n\ndef f():\n    from spark_jobs.local import broker\n"
    assert upward_imports("spark_jobs.runtime.probe", source) == [
        "spark_jobs.runtime.probe:5 imports spark_jobs.local (local is the one-machine side wing)",
        "spark_jobs.runtime.probe:5 imports spark_jobs.local.broker (local is the one-machine side wing)",
    ]


def test_production_code_never_imports_the_side_wing_but_the_cli_may():
    source = "from spark_jobs.local import broker\n"
    for production in ("dags.sigflow_deploy", "spark_jobs.ops.status", "spark_jobs.install.jars", "spark_jobs.jobs.ingest"):
        assert upward_imports(production, source) != []
    assert upward_imports("spark_jobs.cli", source) == []
    assert upward_imports("spark_jobs.local.cluster", source) == []


def test_the_side_wing_sits_beside_runtime():
    assert upward_imports("spark_jobs.local.broker", "from spark_jobs.runtime.kafka import admin\n") == []
    assert upward_imports("spark_jobs.local.broker", "from spark_jobs.ops import status\n") == [
        "spark_jobs.local.broker:1 imports spark_jobs.ops (ops is above local)",
        "spark_jobs.local.broker:1 imports spark_jobs.ops.status (ops is above local)",
    ]


# one module speaks delta-rs; everything else outside Spark reads and writes tables through it
DELTA_RS_MODULE = "spark_jobs.runtime.delta.table_access"


def test_only_table_access_imports_delta_rs():
    importers = sorted(module_name(path) for path in sources()
                       if any(name.split(".")[0] == "deltalake" for _, name in imported_modules(ast.parse(path.read_text()))))
    assert importers == [DELTA_RS_MODULE]


def test_settings_and_the_aws_variables_are_read_in_config_alone():
    """A sigflow setting (SIGFLOW_*) or the object store's variables (AWS_*) read from the
    environment anywhere but the config package would escape its validation; the one-machine stand-ins
    and the process plumbing (JAVA_HOME, PYSPARK_*) are not settings."""
    read_elsewhere = re.compile(r"""environ(?:\.get)?[\[(]\s*["'](?:SIGFLOW_|AWS_)""")
    found = [module_name(path) for path in sources()
             if layer_of(module_name(path)) not in (None, SIDE_WING, "config")
             and read_elsewhere.search(path.read_text())]
    assert found == []


def _runtime_imports(tree: ast.AST):
    """The modules a file imports when it runs (imports under ``if TYPE_CHECKING:`` are not)."""
    typing_only = {id(node) for block in ast.walk(tree)
                   if isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"
                   for stmt in block.body for node in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def test_no_import_cycle_between_modules():
    modules = {module_name(path): path for path in sources()}
    graph = {name: {target for target in _runtime_imports(ast.parse(path.read_text()))
                    if target in modules and target != name} for name, path in modules.items()}
    cycles, state = [], {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                cycles.append(" -> ".join(trail[trail.index(target):] + [target]))
            elif target not in state:
                visit(target, trail + [target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []
