"""Shared fixtures: real DuckDB files in tmp dirs, small native runs, one bundled store per session, ports
for test servers, and the hypothesis profiles."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import io
import itertools
import json
import os
import random
import shutil
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from streamlit import config as streamlit_config
from streamlit.components.v2 import manifest_scanner

from backend.cli import main as cli_main
from backend.demo.bundled import import_bundled
from backend.store import Store
from tests.reliability.cases import WORKER_OUTPUT_KEY, write_summary

# `ci` (the default, what `make test` runs): the same examples on every run and machine, so a red suite is
# red again on the rerun, and no example database written into the checkout by parallel workers. `dev`
# (HYPOTHESIS_PROFILE=dev): fresh random examples each run, failures remembered in .hypothesis/.
# Tests that set max_examples keep their own budget under both.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
# `long` (CREDITLENS_FUZZ_LONG=1, what `python -m bench reliability --loops` sets): fresh examples, and a
# failure kept twice over, so that one case in ten thousand can be replayed: its `@reproduce_failure` blob
# in the report, and its falsifying example in a database that the next long run (or any run with
# HYPOTHESIS_PROFILE=long) tries first. CREDITLENS_HYPOTHESIS_DB moves the database.
LONG_EXAMPLES_DB = Path(
    os.environ.get("CREDITLENS_HYPOTHESIS_DB") or Path(__file__).resolve().parents[1] / ".hypothesis" / "long"
)
settings.register_profile(
    "long",
    deadline=None,
    print_blob=True,
    database=DirectoryBasedExampleDatabase(LONG_EXAMPLES_DB),
    suppress_health_check=[HealthCheck.too_slow],
)
_LONG = os.environ.get("CREDITLENS_FUZZ_LONG") == "1"
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("long" if _LONG else "ci"))

# Every new `AppTest` scans the metadata of every installed distribution for Streamlit components on its
# first run (`BidiComponentManager.discover_and_register_components`): 0.2 s of CPU, about 200 times a
# suite. The installed packages do not change during a run, so the suite scans once per process. The
# Streamlit servers the tests start are separate processes and scan as they always do.
manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)
# An AppTest script run ends as the served app's do (app/server/launch.py: `--runner.postScriptGC false`):
# without a full garbage collection of the test process (tests/app/test_views.py alone: 31.5 -> 30.3 s CPU).
streamlit_config.set_option("runner.postScriptGC", False)


def pytest_configure(config):
    """One torch (OpenMP) thread per test process, and in every process a test starts: `make test` runs one
    worker per CPU, so a second thread per worker only waits for a busy core (the TRL fixtures' training,
    for one, spent 3.5-11.6 s of CPU on two threads under the suite's load against 0.7-1.0 s on one). Set
    for this process (torch is already imported) and through the environment for the processes tests start;
    OMP_NUM_THREADS given in the environment wins."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


# Each pytest-xdist worker takes ports from its own block below Linux's ephemeral range (32768-60999), so
# two workers never start servers on one port and a bind(0) elsewhere never hands one out; the start in
# the block is random so two suites on one machine rarely meet (a port in use is skipped).
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_PORTS = itertools.count(20000 + 400 * (_WORKER % 30) + random.Random().randrange(0, 200))


def free_test_port() -> int:
    """A port no other server (of this suite's workers, or anyone's) listens on, on 127.0.0.1 and 0.0.0.0."""
    for port in _PORTS:
        try:
            for host in ("127.0.0.1", "0.0.0.0"):
                with socket.socket() as s:
                    s.bind((host, port))
        except OSError:
            continue
        return port
    raise AssertionError("unreachable")


def shared_once(tmp_path_factory, name: str, make) -> Path:
    """`make(path)` run once for the whole suite, however many pytest-xdist workers share it: the first
    worker to get here writes `<name>/runs.duckdb` in the run's common temp folder under a file lock, the
    others wait and reuse it (without xdist, the folder is this session's own). Returns the path."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the folder all workers' temp folders sit in
    folder = base / f"shared-{name}"
    folder.mkdir(exist_ok=True)
    path, done = folder / "runs.duckdb", folder / "done"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            path.unlink(missing_ok=True)  # a worker that died halfway leaves no half-written store behind
            make(path)
            done.touch()
    return path


def _import_bundled(path: Path) -> None:
    with Store(path) as store:
        import_bundled(store, quiet=True)


WORKER_MAIN = sys.modules.get("__main__")
"""This process's own `__main__`, as it was when the suite was collected."""


@pytest.fixture(autouse=True)
def _main_module_put_back():
    """Streamlit's script runner (every AppTest, module fixtures' included) leaves the page it ran as
    `sys.modules["__main__"]`, with the page's file: a process pool started later in the same worker with
    "spawn" runs that page again in each child, which dies there (BrokenProcessPool in
    test_parallel_seeds_match_in_process). Every test starts with the process's own."""
    if WORKER_MAIN is not None:
        sys.modules["__main__"] = WORKER_MAIN
    yield


@pytest.fixture(scope="session")
def bundled_template(tmp_path_factory) -> Path:
    """A store with the bundled sample runs (and the demo's teacher), imported once per suite (shared by the
    xdist workers). Read-only by convention: tests take a private copy (`bundled_db`, `copy_store`)."""
    return shared_once(tmp_path_factory, "bundled", _import_bundled)


@pytest.fixture
def few_bootstrap_draws(monkeypatch):
    """20 bootstrap draws instead of 200 for a test whose teacher-bench checks read no bootstrap stderr (the
    estimator rows' spearman_se and _se_group; test_bench_stats.py checks the bootstrap itself): the draws
    were a third to two fifths of such a bench's CPU."""
    from backend.evaluation import bench_stats  # noqa: PLC0415 - only the teacher-bench tests need it

    monkeypatch.setattr(bench_stats, "BOOTSTRAP", 20)


@contextlib.contextmanager
def reads_share_one_instance(db: Path):
    """Hold a read-only connection to `db` for a block that only reads: DuckDB keeps one database instance
    per file and process, so the short-lived connections the code under test opens (one per unit of work)
    reuse it instead of building one each (about 45 ms of CPU apiece). A write in the block is refused
    (StoreBusy), so a test that meant to read only cannot write unseen."""
    with Store(db, read_only=True):
        yield


def copy_store(template: Path, dest: Path) -> Path:
    """A private copy of a closed store file at `dest` (a file path); returns it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(template, dest)
    return dest


@pytest.fixture
def bundled_db(bundled_template, tmp_path) -> Path:
    """This test's own copy of the bundled store (it may write to it)."""
    return copy_store(bundled_template, tmp_path / "bundled" / "runs.duckdb")


def run_cli_here(*args) -> subprocess.CompletedProcess:
    """`creditlens ARGS` in this process, answered as `subprocess.run(..., capture_output=True, text=True)`
    would answer (returncode, stdout, stderr). For tests where a separate process is not the point: the
    session pays for one torch import instead of one per command. Close any store the test holds open
    first (DuckDB refuses a second connection with another mode in the same process)."""
    args = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(args)
        except SystemExit as exc:  # argparse: --help, usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return subprocess.CompletedProcess(["creditlens", *args], code, out.getvalue(), err.getvalue())


def make_records(n_groups: int = 3, group_size: int = 4, seed: int = 0, steps: int = 1) -> list[dict]:
    """Small native records with token ids, per-token arrays, two channels and a style token reward."""
    rng = random.Random(seed)
    records = []
    for step in range(steps):
        for g in range(n_groups):
            prompt = f"step {step} prompt {g}: what is {g} + {g}?"
            for _ in range(group_size):
                n = rng.randint(1, 12)
                ids = [rng.randint(0, 50) for _ in range(n)]
                records.append(
                    {
                        "prompt": prompt,
                        "response": " ".join(map(str, ids)),
                        "step": step,
                        "token_ids": ids,
                        "tokens": [f"t{i}" for i in ids],
                        "logprobs": [-rng.random() for _ in ids],
                        "entropies": [rng.random() * 2 for _ in ids],
                        "rewards": {"task": float(rng.random() < 0.5), "style": -float(rng.random() < 0.3)},
                        "token_rewards": {"style": [0.0] * (n - 1) + [-1.0]},
                        "meta": {"ground_truth": str(2 * g)},
                    }
                )
    return records


def write_jsonl(path: Path, records: list) -> Path:
    with open(path, "w") as fh:
        for rec in records:
            fh.write((rec if isinstance(rec, str) else json.dumps(rec)) + "\n")
    return path


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "runs.duckdb"


@pytest.fixture
def store(db_path: Path):
    s = Store(db_path)
    yield s
    s.close()


def snapshot(store: Store) -> dict:
    """Row counts of every table: 'the store is exactly as before' in a comparable form."""
    tables = [
        r[0]
        for r in store.con.execute(
            "SELECT table_name FROM information_schema.tables ORDER BY table_name"
        ).fetchall()
    ]
    return {t: store.con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


# Fixtures that train real GRPO runs with TRL (about a minute each on 2 cores): their tests share a worker,
# so each is made once per suite, not once per worker.
@pytest.fixture(scope="session")
def trl_plain_log(tmp_path_factory) -> Path:
    """TRL's completion logs of a real 2-step GRPO run with two reward functions (tests/backend/ingest/
    trl_logs.py), trained once per session; the tests that read it share a worker (`TRAINING_FIXTURES`)."""
    from tests.backend.ingest.trl_logs import run_grpo  # noqa: PLC0415 - only the tests that train need it

    return run_grpo(tmp_path_factory.mktemp("trl") / "plain", conversational=False, steps=2)


@pytest.fixture(scope="session")
def trl_conversational_log(tmp_path_factory) -> Path:
    """The same run on conversational prompts (messages in, messages out)."""
    from tests.backend.ingest.trl_logs import run_grpo  # noqa: PLC0415 - only the tests that train need it

    return run_grpo(tmp_path_factory.mktemp("trl") / "conversational", conversational=True, steps=2)


# Fixtures that train a model: every test that uses one (directly or through another fixture) runs on the
# same worker, so each run is trained once per suite.
TRAINING_FIXTURES = ("trl_plain_log", "trl_conversational_log")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the marks (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    """Tests that share something expensive stay on one worker: the browser tests on the session's Streamlit
    server, each browser module that starts its own, the tests of each TRL training fixture, the tests of a
    module that builds a fixture once per module (split over two workers, it was built once on each); every
    other test goes wherever a worker is free."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        if any(name in item.fixturenames for name in TRAINING_FIXTURES):
            item.add_marker(pytest.mark.xdist_group("trl-training"))
        elif item.nodeid.startswith("tests/browser/"):
            group = "browser" if "server" in item.fixturenames else f"browser-{item.module.__name__}"
            item.add_marker(pytest.mark.xdist_group(group))
        elif uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def uses_a_module_fixture(item) -> bool:
    fixtures = getattr(item, "_fixtureinfo", None)
    definitions = fixtures.name2fixturedefs.values() if fixtures else ()
    return any(defs and defs[-1].scope == "module" for defs in definitions)


WORKER_TALLIES: Counter = Counter()  # the controller's sum of the workers' reliability cases


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: known only while xdist is loaded
def pytest_testnodedown(node, error):
    """pytest-xdist, on the controller: add up the reliability cases a worker tried."""
    WORKER_TALLIES.update(getattr(node, "workeroutput", {}).get(WORKER_OUTPUT_KEY, {}))


def pytest_terminal_summary(terminalreporter):
    """A run with workers (a run without them prints from tests/reliability/conftest.py)."""
    write_summary(terminalreporter, WORKER_TALLIES)


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium, one per worker (tests/browser, and the TRL recorder's page): a process can
    hold one Playwright sync session at a time."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - browser tests only

    from bench.chromium import CHROMIUM, launch  # noqa: PLC0415 - browser tests only

    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (make browser-deps)")
    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()
