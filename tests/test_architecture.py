"""The shape of the code: no import cycles, lower layers never import higher ones, modules stay one
screen of jobs (at most 500 formatted lines), every registered estimator has a loop twin and a derivation,
every model-scored one a score producer, and the commands that only read the store never import torch
(they run in a subprocess here).

The import graph is built from the AST of backend/, app/, pages/ (the views), bench/ and creditlens/:
every `import` and `from ... import` anywhere in a module (top level or inside a function) is an edge, so
a cycle hidden in a function-level import still counts.
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from backend.core.batch_fields import MODEL_SCORE_EXTRAS, MODEL_SCORED
from backend.estimators import reference, registry
from backend.models.score_producers import PRODUCERS

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("backend", "app", "pages", "bench", "creditlens")
MAX_LINES = 500  # 450 lines before `ruff format`, which made the source 11% longer (one argument per line)


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every source file of the packages."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The longest known module that `name` (a module, or a module attribute) lies in."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def _imported_names(module: str, path: Path) -> set[str]:
    """Every dotted name the module imports. Importing `a.b` also runs `a/__init__.py`, as every
    submodule import does; that implicit step is not an edge of the design, so it is not counted."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:  # a submodule if there is one, else an attribute of the package
                full = f"{prefix}.{alias.name}"
                names.add(full if full in MODULES else prefix)
    return names


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    """Module -> the modules it imports; parsed once per test process (about 1.3 s of the suite's CPU per
    call), read-only for the tests that share it."""
    graph = {}
    for module, path in MODULES.items():
        edges = set()
        for name in _imported_names(module, path):
            target = _resolve(name)
            if target is not None and target != module:
                edges.add(target)
        graph[module] = frozenset(edges)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_the_known_edges():
    graph = _graph()
    assert "backend.cli.main" in MODULES and "backend.estimators.registry" in MODULES
    assert "backend.cli.store" in graph["backend.cli.main"]
    assert "backend.core.errors" in graph["backend.cli.main"]
    # a cycle on purpose is found
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles (each line one circle of modules):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


@pytest.mark.parametrize("forbidden", ["app", "pages", "streamlit", "creditlens"])
def test_backend_never_imports_a_higher_layer(forbidden):
    """backend/ is below the app, its views (pages/) and the notebook API (creditlens), which is below
    nothing but holds names only: it may import backend/, never the app."""
    offenders = []
    for module, path in MODULES.items():
        if not module.startswith(("backend", "creditlens")) or module.startswith(forbidden):
            continue
        for name in _imported_names(module, path):
            if name == forbidden or name.startswith(forbidden + "."):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not offenders, "\n".join(offenders)


# backend's packages from the bottom up: a package imports only packages of lower layers (never one of its
# own layer, never one above). Inside a package, modules import each other freely but without cycles
# (test_no_import_cycles).
BACKEND_LAYERS = (
    ("core",),  # errors, the batch and its field names, chunk plans, ranks
    ("store", "estimators"),  # the DuckDB store; the credit estimators (methods/ on their machinery)
    ("rewards", "ingest"),  # verifiers and step verifiers; the importers
    ("models", "credit"),  # the policy model's jobs; a run's estimates, channels and credit summaries
    ("views", "evaluation"),  # the numbers the views show; oracle, teacher bench and their metrics
    ("monitor",),  # credit-health monitors (they read the explorer's trends)
    ("demo",),  # the bundled sample runs: how they are made and imported
    ("cli",),  # the commands
)


def _backend_package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "backend" and len(parts) > 1 else None


def test_backend_packages_import_only_lower_layers():
    layer = {package: i for i, packages in enumerate(BACKEND_LAYERS) for package in packages}
    packages = {p.name for p in (ROOT / "backend").iterdir() if (p / "__init__.py").exists()}
    assert packages == set(layer), (
        f"packages without a layer or layers without a package: {packages ^ set(layer)}"
    )
    loose = sorted(
        m for m in MODULES if m.startswith("backend.") and m.count(".") == 1 and m[8:] not in layer
    )
    assert not loose, f"modules outside every package: {loose}"
    offenders = [
        f"{module} ({_backend_package(module)}, layer {layer[_backend_package(module)]}) imports {target} "
        f"(layer {layer[_backend_package(target)]})"
        for module, edges in _graph().items()
        if _backend_package(module) in layer
        for target in edges
        if _backend_package(target) in layer
        and _backend_package(target) != _backend_package(module)
        and layer[_backend_package(target)] >= layer[_backend_package(module)]
    ]
    assert not offenders, "\n".join(offenders)


def test_estimator_machinery_never_imports_a_method():
    """Inside estimators/: the methods (methods/) stand on the machinery (registry, config bases, reductions,
    fitting, value sources); the machinery never imports a method (the twins and `reference`, test-only,
    may)."""
    offenders = [
        f"{module} imports {target}"
        for module, edges in _graph().items()
        if module.startswith("backend.estimators.")
        and not module.startswith(("backend.estimators.methods", "backend.estimators.twins"))
        and module not in ("backend.estimators.reference",)
        for target in edges
        if target.startswith("backend.estimators.methods.")
    ]
    assert not offenders, "\n".join(offenders)


def test_nothing_imports_the_command_line():
    """The commands are the top floor: only the entry point (and tests) import them."""
    offenders = [
        f"{module} imports {target}"
        for module, edges in _graph().items()
        if not module.startswith("backend.cli")
        for target in edges
        if target == "backend.cli" or target.startswith("backend.cli.")
    ]
    assert not offenders, "\n".join(offenders)


# Tests run `creditlens` in their own process through one helper, tests.conftest.run_cli_here (issue 27
# item 7). The exceptions: conftest.py defines it, test_cli.py runs the command in a separate process on
# purpose, and this module runs it in a fresh interpreter to see what a command imports.
# test_ray_split.py drives a Ray cluster: a driver's connection lasts as long as its process, so each command
# there is a process of its own.
ONE_CLI_HELPER_EXCEPTIONS = (
    "tests/conftest.py",
    "tests/backend/test_cli.py",
    "tests/test_architecture.py",
    "tests/backend/test_ray_split.py",
)


def test_tests_run_the_command_line_through_one_helper():
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ONE_CLI_HELPER_EXCEPTIONS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            if isinstance(node, ast.ImportFrom) and node.module in ("backend.cli", "backend.cli.main"):
                if any(alias.name == "main" for alias in node.names):
                    offenders.append(f"{rel}:{node.lineno}: imports main from {node.module}")
            elif isinstance(node, ast.Import) and any(a.name == "backend.cli.main" for a in node.names):
                offenders.append(f"{rel}:{node.lineno}: imports backend.cli.main")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "_cli":
                offenders.append(f"{rel}:{node.lineno}: defines _cli")
    assert not offenders, "run the command line with tests.conftest.run_cli_here:\n" + "\n".join(offenders)


def test_source_modules_stay_short():
    long = []
    for path in MODULES.values():
        rel = str(path.relative_to(ROOT))
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            long.append(f"{rel}: {lines} lines (at most {MAX_LINES}; split it by concern)")
    assert not long, "\n".join(long)


MAX_FUNCTION_LINES = 100
FUNCTION_PACKAGES = ("backend", "app", "pages", "creditlens")
# Functions over the limit still to be split (take one off this list with its split); none today.
LONG_FUNCTIONS_TO_SPLIT: set[str] = set()


def test_no_function_is_over_a_hundred_lines():
    """A function over 100 lines does several jobs; split it by job (as backend/ingest/pipeline.py's
    `_import` was: staging, checks, publishing). Nested functions count in their parent's lines too."""
    long = []
    for name, path in MODULES.items():
        if name.split(".")[0] not in FUNCTION_PACKAGES:
            continue
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES and f"{rel}:{node.name}" not in LONG_FUNCTIONS_TO_SPLIT:
                    long.append(f"{rel}:{node.lineno} {node.name}: {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_the_long_functions_list_names_only_functions_still_too_long():
    """An entry left on LONG_FUNCTIONS_TO_SPLIT after its split would let the function grow back."""
    still_long = set()
    for entry in LONG_FUNCTIONS_TO_SPLIT:
        rel, function = entry.split(":")
        for node in ast.walk(ast.parse((ROOT / rel).read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
                if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                    still_long.add(entry)
    assert still_long == LONG_FUNCTIONS_TO_SPLIT, sorted(LONG_FUNCTIONS_TO_SPLIT - still_long)


def test_every_registered_estimator_has_a_twin():
    missing = sorted(set(registry.names()) - set(reference.twin_names()))
    assert not missing, f"no twin for {', '.join(missing)}"
    assert reference.missing_twins() == []


def test_every_registered_estimator_explains_itself():
    """The Rollout view's "why this credit" and `creditlens explain --pos` read the derivation registered
    with the estimator (`register(..., explain=fn)`), not a list kept elsewhere."""
    missing = sorted(n for n in registry.names() if registry.get(n).explain is None)
    assert not missing, (
        f"no derivation for {', '.join(missing)}: pass explain=fn to its @register, fn "
        "written beside it from the steps in backend/estimators/explaining.py"
    )


def test_every_model_scored_estimator_has_a_score_producer():
    """`creditlens model-credit --method NAME` runs the producer registered for NAME
    (`backend.models.score_producers`); the command line's choices (`MODEL_SCORED`, read without torch) are
    the registered producers, and every estimator that reads model scores has one."""
    assert set(PRODUCERS) == set(MODEL_SCORED)
    readers = {
        MODEL_SCORE_EXTRAS[need]
        for n in registry.names()
        for need in registry.get(n).needs
        if need in MODEL_SCORE_EXTRAS
    }
    assert readers == set(MODEL_SCORED), readers


def _app_edges(prefixes: tuple[str, ...]) -> list[tuple[str, str]]:
    """(module, imported module) for every import edge out of the app modules under `prefixes`."""
    return [
        (module, target)
        for module, edges in _graph().items()
        if module.startswith(prefixes)
        for target in sorted(edges)
    ]


def _within_package(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


SERVER = ("app.server",)
# What the server may import from app/: itself, the access settings it hands over, the list of views it warms
# and the name of the URL's token parameter.
SERVER_MAY_IMPORT = ("app.server", "app.access", "app.navigation", "app.keys")


def test_the_server_imports_no_view_code():
    """app/server/ (launch, the ASGI app, gate, warm-up) starts the views by path and by url path; it never
    imports a view, a view helper, the views' data or the session state."""
    offenders = [
        f"{module} imports {target}"
        for module, target in _app_edges(SERVER)
        if target.startswith("app") and not _within_package(target, SERVER_MAY_IMPORT)
    ]
    assert not offenders, "\n".join(offenders)


def test_only_the_entry_point_imports_the_server():
    """In app/, the server package is imported by the entry point alone (its cookie check); views, view
    helpers and the views' data never reach the server or its token."""
    offenders = [
        f"{module} imports {target}"
        for module, target in _app_edges(("app",))
        if not _within_package(module, SERVER) and module != "app.main" and _within_package(target, SERVER)
    ]
    assert not offenders, "\n".join(offenders)


def test_view_helpers_never_import_the_server_or_the_access_settings():
    """app/ui/ (figures, widgets, panels) draws; who may do what is checked where it is done (app/actions.py,
    app/jobs.py, the server), so no view helper imports app/server/ or app/access.py."""
    offenders = [
        f"{module} imports {target}"
        for module, target in _app_edges(("app.ui",))
        if _within_package(target, ("app.server", "app.access"))
    ]
    assert not offenders, "\n".join(offenders)


def test_the_app_imports_neither_tests_nor_bench():
    """The browser tests' Chromium launcher (bench/chromium.py) and the tests' helpers stay outside the
    installed app: nothing in app/ or pages/ imports tests/ or bench/."""
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for module, path in MODULES.items()
        if _within_package(module, ("app", "pages"))
        for name in _imported_names(module, path)
        if _within_package(name, ("tests", "bench"))
    ]
    assert not offenders, "\n".join(offenders)


def test_a_views_data_module_reads_only_the_store_and_the_shared_module():
    """app/view_data/: one module per view, each calling backend/ through the store's loaders (app/data.py)
    and `shared` (what several views read); never another view's module, a view helper, the session state
    or the server, so a view's numbers can be read (and tested) apart from the screen."""
    allowed = {"app.data", "app.view_data", "app.view_data.shared"}
    offenders = [
        f"{module} imports {target}"
        for module, target in _app_edges(("app.view_data",))
        if target.startswith("app.") and target not in allowed
    ]
    assert not offenders, "\n".join(offenders)


def test_nothing_imports_a_view():
    """The views are scripts Streamlit runs (app/navigation.py names them by path); no module imports one,
    and app/ (what the views share) never reaches up into pages/."""
    offenders = [
        f"{module} imports {target}"
        for module, edges in _graph().items()
        for target in sorted(edges)
        if _within_package(target, ("pages",))
    ]
    assert not offenders, "\n".join(offenders)


def test_views_reach_the_backend_only_through_app():
    """A view (pages/) reads like its screen: its numbers come from app/ modules that call backend/."""
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for module, path in MODULES.items()
        if _within_package(module, ("pages",))
        for name in _imported_names(module, path)
        if name == "backend" or name.startswith("backend.")
    ]
    assert not offenders, "\n".join(offenders)


# Commands that read the store without computing: they must start in about the time of importing DuckDB
# and pandas, so none of them may import torch, transformers or the estimators (docs/benchmarks.md).
LIGHT_COMMANDS = {
    "help": ["--help"],
    "runs": ["runs", "--db", "{db}"],
    "runs --json": ["runs", "--db", "{db}", "--json"],
    "rollouts": [
        "rollouts",
        "--db",
        "{db}",
        "--run",
        "demo",
        "--json",
        "--sort=-length",
        "--where",
        "length>=10",
        "--search",
        "the",
    ],
    "trends": ["trends", "--db", "{db}", "--run", "demo", "--json"],
    "token-classes": ["token-classes", "--db", "{db}", "--run", "demo"],
    "token-classes --add": [
        "token-classes",
        "--db",
        "{db}",
        "--run",
        "demo",
        "--add",
        "numbers",
        "regex",
        "[0-9]",
        "--json",
    ],
    "main-channel": ["main-channel", "--db", "{db}", "--run", "demo"],
    "delete": ["delete", "--db", "{db}", "--run", "oracle"],
    "estimators": ["estimators"],
    "estimators --json": ["estimators", "--json"],
    "monitor --defaults": ["monitor", "--defaults"],
}
HEAVY_MODULES = ("torch", "transformers", "backend.estimators")
# Runs the command as `creditlens` does, then writes the names of every module it imported to a file.
PROBE = """import json, sys
from backend.cli.main import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as f:
    json.dump(sorted(sys.modules), f)
sys.exit(code)
"""


def _imported_by(args: list[str], tmp_path: Path) -> list[str]:
    """Every module `creditlens ARGS` imports, run in a fresh interpreter (asserts it succeeds)."""
    modules_file = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(modules_file), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(modules_file.read_text())


def _within(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)]


@pytest.mark.parametrize("name", list(LIGHT_COMMANDS))
def test_commands_that_only_read_never_import_torch(name, bundled_db, tmp_path):
    args = [a.format(db=bundled_db) for a in LIGHT_COMMANDS[name]]
    heavy = _within(_imported_by(args, tmp_path), HEAVY_MODULES)
    assert not heavy, (
        f"`creditlens {' '.join(args)}` imported {', '.join(heavy[:8])}"
        f"{' ...' if len(heavy) > 8 else ''}; find the chain with `python -X importtime -m "
        "backend.cli ...` and import the heavy module inside the function that computes "
        "(backend/cli/__init__.py)"
    )


def test_estimate_imports_no_model_engine(bundled_db, tmp_path):
    """`estimate` needs torch and the estimators; no estimator runs a model (the model-based ones read
    scores cached by `creditlens model-credit`), so transformers and the engines stay out."""
    args = [
        "estimate",
        "--db",
        str(bundled_db),
        "--run",
        "demo",
        "--estimator",
        "grpo",
        "--out",
        str(tmp_path / "grpo.parquet"),
    ]
    modules = _imported_by(args, tmp_path)
    assert "backend.estimators.registry" in modules  # the probe sees what the command computes with
    heavy = _within(
        modules,
        ("transformers", "vllm", "backend.models", "backend.views.explain", "backend.monitor.monitors"),
    )
    assert not heavy, f"`creditlens estimate` imported {', '.join(heavy[:8])}"
