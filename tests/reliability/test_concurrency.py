"""Concurrency: readers (the app's StoreHandle, AppTest sessions) while the CLI imports into the same
store; two imports at once. Nothing corrupt, nothing lost, and what must wait says so."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend.store import Store, StoreHandle
from backend.store.handle import StoreBusy
from tests.conftest import make_records
from tests.reliability.conftest import PYTHON, ROOT, run_cli, tally
from tests.reliability.fuzzing import write_jsonl

pytestmark = pytest.mark.timeout(180)


def _big(path: Path, n_groups: int = 150) -> tuple[Path, int]:
    records = make_records(n_groups=n_groups, group_size=8, seed=4)
    for rec in records:
        for name in ("token_ids", "tokens", "logprobs", "entropies"):
            rec[name] = rec[name] * 6
        rec["token_rewards"] = {"style": rec["token_rewards"]["style"] * 6}
    return write_jsonl(path, records), len(records)


@pytest.fixture
def db(tmp_path) -> Path:
    db = tmp_path / "runs.duckdb"
    src = write_jsonl(tmp_path / "base.jsonl", make_records(n_groups=2, group_size=3))
    assert run_cli(["import", src, "--db", db, "--run", "base", "--quiet"]).rc == 0
    return db


def _import_proc(db: Path, src: Path, run: str) -> subprocess.Popen:
    return subprocess.Popen(
        [PYTHON, "-m", "backend.cli", "import", str(src), "--db", str(db), "--run", run, "--quiet"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_app_readers_during_a_cli_import_see_the_run_absent_or_complete(db, tmp_path):
    src, n = _big(tmp_path / "big.jsonl")
    handle = StoreHandle(db, wait_seconds=60)
    seen: list[str] = []
    problems: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                with handle.read() as store:
                    runs = {r["name"]: r for r in store.list_runs()}
                    assert runs["base"]["rollouts"] == 6
                    if "big" in runs:
                        assert runs["big"]["rollouts"] == n, runs["big"]
                        index = store.rollout_index("big")
                        assert len(index) == n
                        store.load_batch("big", group_ids=[int(index["group_id"].iloc[-1])]).validate()
                        seen.append("complete")
                    else:
                        seen.append("absent")
            except StoreBusy:
                seen.append("busy")
            except BaseException as exc:  # noqa: BLE001 - collected and reported below
                problems.append(exc)
                return
            time.sleep(0.01)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    proc = _import_proc(db, src, "big")
    out, err = proc.communicate(timeout=150)
    time.sleep(0.3)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    # readers hold the file too: the import waits for them (CREDITLENS_LOCK_WAIT) instead of failing
    assert proc.returncode == 0, err[-2000:]
    assert not problems, problems[0]
    with Store(db, read_only=True) as store:
        assert {r["name"]: r["rollouts"] for r in store.list_runs()} == {"base": 6, "big": n}
    for state in set(seen):
        tally("StoreHandle readers x3 during CLI import", f"read: run {state}")
    tally("StoreHandle readers x3 during CLI import", f"{len(seen)} reads, 0 inconsistent")


def test_two_imports_at_once_the_second_waits(db, tmp_path):
    a, n_a = _big(tmp_path / "a.jsonl", n_groups=100)
    b, n_b = _big(tmp_path / "b.jsonl", n_groups=50)
    pa_, pb = _import_proc(db, a, "a"), _import_proc(db, b, "b")
    results = {}
    for run, proc in (("a", pa_), ("b", pb)):
        _, err = proc.communicate(timeout=150)
        results[run] = (proc.returncode, err)
        assert "Traceback" not in err, err[-2000:]
        assert proc.returncode == 0, err[-2000:]
    with Store(db, read_only=True) as store:
        runs = {r["name"]: r["rollouts"] for r in store.list_runs()}
    expected = {"base": 6} | {r: n for r, n in (("a", n_a), ("b", n_b)) if results[r][0] == 0}
    assert runs == expected
    tally("two CLI imports at once", "both imported (the second waited for the lock)")


def test_app_sessions_render_while_an_import_runs(db, tmp_path, monkeypatch):
    monkeypatch.setenv("CREDITLENS_DB", str(db))
    src, n = _big(tmp_path / "big.jsonl", n_groups=150)
    proc = _import_proc(db, src, "big")
    sessions = 0
    try:
        while proc.poll() is None and sessions < 3:
            at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=60).run()
            messages = [e.value for e in at.exception] + [str(e.value) for e in at.error]
            # a session either renders or says the store is busy; never a traceback
            assert not at.exception, messages
            assert all("another process" in m or "busy" in m.lower() for m in messages), messages
            sessions += 1
    finally:
        _, err = proc.communicate(timeout=150)
    assert proc.returncode == 0, err[-2000:]
    tally("AppTest sessions during CLI import", f"{sessions} sessions rendered, no exception")
