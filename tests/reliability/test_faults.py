"""Faults: SIGKILL in the middle of an import or a resample, a full disk, a read-only directory, a store
locked by another process. After each, the store opens and is consistent: a run is absent or complete."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

from backend.store import Store, StoreHandle
from backend.store.handle import StoreBusy
from tests.conftest import make_records
from tests.reliability.conftest import LONG, PYTHON, ROOT, long_budget, run_cli, store_digest, tally
from tests.reliability.fuzzing import write_jsonl

pytestmark = pytest.mark.timeout(900 if LONG else 180)  # the long mode: 12 kills, not 3
KILLS = long_budget(12, 3)

# A child that imports with a progress callback printing the fraction done, so the parent can kill it
# at a known point inside the transaction (not merely "some time after start").
IMPORT_CHILD = textwrap.dedent(
    """
        from backend.ingest import import_path
    from backend.store import Store
    with Store(sys.argv[1]) as store:
        print("open", flush=True)
        import_path(store, sys.argv[2], "big", on_progress=lambda f: print(f"{f:.4f}", flush=True))
    print("done", flush=True)
    """
)


def _big_jsonl(path: Path, n_records: int = 6000) -> Path:
    records = make_records(n_groups=n_records // 8, group_size=8, seed=11)
    for rec in records:  # long enough rows that the import spends seconds inside its transaction
        rec["token_ids"] = rec["token_ids"] * 8
        for name in ("tokens", "logprobs", "entropies"):
            rec[name] = rec[name] * 8
        rec["token_rewards"] = {"style": rec["token_rewards"]["style"] * 8}
    return write_jsonl(path, records)


def _consistent(db: Path, expected_rollouts: int) -> str:
    """Open the store after a crash: `big` must be absent, or present with every rollout and score."""
    with Store(db) as store:
        runs = {r["name"]: r for r in store.list_runs()}
        assert runs["base"]["rollouts"] == 6
        if "big" not in runs:
            return "absent"
        assert runs["big"]["rollouts"] == expected_rollouts, runs["big"]
        run_id = store.run_id("big")
        scores = store.con.execute("SELECT count(*) FROM scores WHERE run_id = ?", [run_id]).fetchall()[0][0]
        assert scores == 2 * expected_rollouts
        imports = store.con.execute("SELECT count(*) FROM imports WHERE run_id = ?", [run_id]).fetchall()
        assert imports[0][0] == 1
        return "complete"


@pytest.fixture
def db_with_base(tmp_path) -> Path:
    db = tmp_path / "runs.duckdb"
    src = write_jsonl(tmp_path / "base.jsonl", make_records(n_groups=2, group_size=3))
    assert run_cli(["import", src, "--db", db, "--run", "base", "--quiet"]).rc == 0
    return db


def test_sigkill_at_random_points_of_an_import_leaves_the_run_absent_or_complete(db_with_base, tmp_path):
    db = db_with_base
    big = _big_jsonl(tmp_path / "big.jsonl")
    n = sum(1 for _ in open(big))
    rng = random.Random(7)
    outcomes = []
    for k in range(KILLS):
        before = store_digest(db)
        target = rng.uniform(0.05, 1.0) if k < KILLS - 1 else 1.0  # the last one: during COMMIT
        child = subprocess.Popen(
            [PYTHON, "-c", IMPORT_CHILD, str(db), str(big)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for line in child.stdout:
            if line.strip() not in ("open", "done") and float(line) >= target:
                break
        if target == 1.0:
            time.sleep(rng.uniform(0, 0.05))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        outcome = _consistent(db, n)
        outcomes.append(outcome)
        if outcome == "absent":
            assert store_digest(db) == before, "a killed import left rows behind"
        else:
            assert run_cli(["delete", "--db", db, "--run", "big"]).rc == 0
        tally(f"SIGKILL during import (at {target:.0%})", f"run {outcome}")
    # the store still takes the same import to completion afterwards
    assert run_cli(["import", big, "--db", db, "--run", "big", "--quiet"]).rc == 0
    assert _consistent(db, n) == "complete"


def test_sigkill_during_a_resample_keeps_samples_all_or_nothing(tmp_path):
    spec = json.loads((ROOT / "sample_runs" / "demo_run.json").read_text())
    model = ROOT / "sample_runs" / spec["model"]
    db = tmp_path / "runs.duckdb"
    src = ROOT / "sample_runs" / spec["file"]
    assert run_cli(["import", src, "--db", db, "--run", "demo", "--model", model, "--quiet"]).rc == 0
    args = [
        "resample",
        "--db",
        str(db),
        "--run",
        "demo",
        "--rollout",
        "0",
        "--positions",
        "1,2",
        "--samples",
        "4",
        "--engine",
        "transformers",
    ]
    cmd = [PYTHON, "-m", "backend.cli", *args]
    rng = random.Random(3)
    for _ in range(2 if LONG else 1):
        child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(2.0, 6.0))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        with Store(db) as store:
            counts = store.resample_values("demo", 0)
        assert counts.empty or set(counts["n"]) == {4}, counts  # nothing, or every position complete
        tally("SIGKILL during resample", "samples all or nothing")
    done = run_cli(args)  # in-process: the model stack is already imported here
    assert done.rc == 0, done.err[-2000:]
    with Store(db, read_only=True) as store:
        values = store.resample_values("demo", 0)
    assert set(values["pos"]) >= {1, 2} and (values["n"] % 4 == 0).all()


# --- full disk and read-only directory ---------------------------------------------------------
FSIZE_CHILD = textwrap.dedent(
    """
    import resource, signal, sys
    from backend.cli import main
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    sys.exit(main(sys.argv[2:]))
    """
)


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("detected format")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_full_disk_gives_one_line_and_keeps_the_store(db_with_base, tmp_path):
    db = db_with_base
    big = _big_jsonl(tmp_path / "big.jsonl", n_records=4000)
    before = store_digest(db)
    limit = db.stat().st_size + 256 * 1024  # the WAL or the checkpoint outgrows this
    proc = subprocess.run(
        [
            PYTHON,
            "-c",
            FSIZE_CHILD,
            str(limit),
            "import",
            str(big),
            "--db",
            str(db),
            "--run",
            "big",
            "--quiet",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    msg = _one_line(proc.stderr)
    assert "nothing was written" in msg or "disk" in msg, msg
    assert _consistent(db, 4000) == "absent"
    assert store_digest(db) == before
    tally("full disk (RLIMIT_FSIZE)", "clean error, store unchanged")


@pytest.fixture
def immutable_dir(tmp_path):
    """A directory nobody can write to, root included (`chattr +i`); skips where unsupported."""
    d = tmp_path / "ro"
    d.mkdir()
    yield d
    subprocess.run(["chattr", "-i", str(d)], capture_output=True)


def _make_immutable(d: Path) -> None:
    proc = subprocess.run(["chattr", "+i", str(d)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"chattr +i not available: {proc.stderr.strip()}")


def test_read_only_directory_gives_one_line(immutable_dir, tmp_path):
    src = write_jsonl(tmp_path / "r.jsonl", make_records(n_groups=1, group_size=2))
    _make_immutable(immutable_dir)
    # a new store in a directory that refuses files
    result = run_cli(["import", src, "--db", immutable_dir / "runs.duckdb", "--run", "r", "--quiet"])
    assert result.rc == 2 and len(result.err_lines) == 1 and "Traceback" not in result.err, result.err
    assert str(immutable_dir / "runs.duckdb") in result.err
    # a new store under a directory that cannot be created
    result = run_cli(["init", "--db", immutable_dir / "sub" / "runs.duckdb"])
    assert result.rc == 2 and "cannot create its directory" in result.err, result.err
    tally("read-only directory", "clean error")


def test_existing_store_in_a_read_only_directory_can_still_be_read(tmp_path):
    d = tmp_path / "ro2"
    d.mkdir()
    db = d / "runs.duckdb"
    src = write_jsonl(tmp_path / "r.jsonl", make_records(n_groups=1, group_size=2))
    assert run_cli(["import", src, "--db", db, "--run", "r", "--quiet"]).rc == 0
    _make_immutable(d)
    try:
        listing = run_cli(["runs", "--db", db, "--json"])
        assert listing.rc == 0 and json.loads(listing.out)[0]["name"] == "r"
        result = run_cli(["import", src, "--db", db, "--run", "r2", "--quiet"])
        assert result.rc == 2 and len(result.err_lines) == 1 and "Traceback" not in result.err, result.err
    finally:
        subprocess.run(["chattr", "-i", str(d)], capture_output=True)
    tally("read-only directory", "reads work, write is a clean error")


# --- a store locked by another process -------------------------------------------------------------
HOLDER = textwrap.dedent(
    """
    import sys, time
    from backend.store import Store
    store = Store(sys.argv[1])
    print("holding", flush=True)
    if sys.argv[2] == "until released":
        sys.stdin.readline()
    else:
        time.sleep(float(sys.argv[2]))
    store.close()
    """
)


def _hold(db: Path, seconds: float | None) -> subprocess.Popen:
    """Another process holding the store's write lock for `seconds`, or (None) until `_release`."""
    how = "until released" if seconds is None else str(seconds)
    child = subprocess.Popen(
        [PYTHON, "-c", HOLDER, str(db), how],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "holding"
    return child


def _release(child: subprocess.Popen) -> None:
    child.stdin.close()
    child.wait(timeout=30)


def _printed(log: Path, child: subprocess.Popen, text: str) -> None:
    """Wait until `child`'s output (in `log`) holds `text`; a child that ends first fails the test."""
    deadline = time.monotonic() + 120  # a hang guard, not a measurement
    while text not in log.read_text():
        assert child.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)


def test_locked_store_gives_clear_messages_and_readers_wait(db_with_base, tmp_path, monkeypatch):
    db = db_with_base
    monkeypatch.setenv("CREDITLENS_LOCK_WAIT", "0.5")  # the CLI waits this long for the lock, then says so
    src = write_jsonl(tmp_path / "r.jsonl", make_records(n_groups=1, group_size=2))
    child = _hold(db, 60)
    try:
        result = run_cli(["import", src, "--db", db, "--run", "r", "--quiet"])
        assert result.rc == 2 and len(result.err_lines) == 1, result.err
        assert "another process is writing to the store" in result.err and "try again" in result.err
        assert run_cli(["runs", "--db", db]).rc == 2
        handle = StoreHandle(db, wait_seconds=0.3)
        with pytest.raises(StoreBusy, match="try again when it finishes"), handle.read():
            pass
    finally:
        child.kill()
        child.wait()
    tally("store locked by another process", "clear message")
    # a reader that waits long enough gets in once the writer is gone
    child = _hold(db, 1.0)
    start = time.monotonic()
    with StoreHandle(db, wait_seconds=30).read() as store:
        assert [r["name"] for r in store.list_runs()] == ["base"]
    assert time.monotonic() - start >= 0.5
    child.wait(timeout=30)
    tally("store locked by another process", "reader waited, then read")


def test_a_store_created_by_another_process_in_the_meantime_is_waited_for(tmp_path, monkeypatch):
    """Two processes starting on a new store (`creditlens watch`: the follower and the app): one checks that
    the file is missing, the other creates it and holds its write lock, then the first opens it. The first
    waits for the lock like any writer; it used to fail at once ("the store is open for writing in another
    process"). The race is forced: the file exists and is held, while the check says it is missing."""
    db = tmp_path / "new.duckdb"
    child = _hold(db, 1.5)
    real_exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda self: False if self == db else real_exists(self))
    start = time.monotonic()
    handle = StoreHandle(db, wait_seconds=30)
    assert time.monotonic() - start >= 0.5  # it waited for the holder
    monkeypatch.undo()
    with handle.read() as store:
        assert store.list_runs() == []
    child.wait(timeout=30)
    tally("store locked by another process", "creator waited for the other creator")


def test_a_follower_waits_out_another_process_holding_the_store_and_imports_the_step(tmp_path):
    """`import --follow` runs for a whole training run; another process may hold the store past the lock
    wait (a big import, a resample). The step file is then imported at a later poll, and the follower says
    why it is late instead of ending."""
    from bench.live import write_step  # noqa: PLC0415 - the recorder's way of writing a step file

    db, folder = tmp_path / "runs.duckdb", tmp_path / "steps"
    folder.mkdir()
    Store(db).close()
    # held until the follower says it waits: a hold of a few seconds ended, on a loaded machine, before the
    # follower had started (it then never waited at its start, and the test failed in the long loops)
    child = _hold(db, None)
    records = pa.Table.from_pylist(make_records(n_groups=2, group_size=2, steps=2))
    write_step(records, folder, 0)
    command = ["import", str(folder), "--db", str(db), "--run", "live", "--follow", "--poll", "0.2"]
    log = tmp_path / "follower.err"
    with open(log, "w") as err_file:
        follower = subprocess.Popen(
            [PYTHON, "-m", "backend.cli", *command],
            cwd=ROOT,
            env={**os.environ, "CREDITLENS_LOCK_WAIT": "0.5", "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=err_file,
            text=True,
            preexec_fn=lambda: signal.signal(
                signal.SIGINT, signal.SIG_DFL
            ),  # see test_real_logs' follow test
        )

    def wait_for(rollouts: int) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                with Store(db, read_only=True) as store:
                    if store.has_run("live") and store.list_runs()[0]["rollouts"] == rollouts:
                        return
            except Exception:  # noqa: BLE001 - the follower holds the write lock while it imports
                pass
            assert follower.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)

    try:
        _printed(log, follower, "steps: waiting: ")  # busy at the start: the follower waits
        _release(child)
        wait_for(4)
        child = _hold(db, None)  # busy when the next step lands
        write_step(records, folder, 1)
        _printed(log, follower, "step_000001.parquet: waiting: ")
        _release(child)
        wait_for(8)
    finally:
        if child.poll() is None:
            _release(child)
        follower.send_signal(signal.SIGINT)
        out, _ = follower.communicate(timeout=30)
    err = log.read_text()
    assert follower.returncode == 0, err
    assert "steps: waiting: " in err and "another process is writing to the store" in err, err
    assert "step_000001.parquet: waiting: " in err, err
    assert "step_000001.parquet: live: imported 4 rollouts" in out and "8 rollouts from 2 files" in out, out
    tally("store locked by another process", "follower waited, then imported")


def test_the_followers_monitors_skip_a_step_while_another_process_holds_the_store(
    db_with_base, monkeypatch, capsys
):
    """After a step, `import --follow --monitor` reruns the monitors over the whole run; a store held past the
    lock wait skips them for that step (the next step's run covers it) instead of ending the follower."""
    from argparse import Namespace  # noqa: PLC0415

    from backend.cli.monitor import live_monitor  # noqa: PLC0415 - heavy (torch)

    monkeypatch.setenv("CREDITLENS_LOCK_WAIT", "0.3")
    watch = live_monitor(Namespace(db=db_with_base, monitor_config=None))
    child = _hold(db_with_base, 60)
    try:
        watch("base")
    finally:
        child.kill()
        child.wait()
    assert "monitors skipped this step: " in capsys.readouterr().err
    watch("base")  # and they run again once the store is free
    assert "monitors skipped" not in capsys.readouterr().err
    tally("store locked by another process", "follower's monitors skipped a step")


CLI_CHILD = textwrap.dedent(
    """
    import sys
    from backend import cli
    cli.build_parser()  # import every command module first, so the signal lands in the command itself
    print("ready", flush=True)
    sys.exit(cli.main(sys.argv[1:]))
    """
)


def _ctrl_c_outcome(returncode: int, err: str, db: Path, before: dict, n: int) -> str:
    """Exit 130 and one line that says truthfully what the store holds: nothing new (and the store exactly as
    before), or the whole import (the Ctrl-C came after its COMMIT, or inside it and the COMMIT landed)."""
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("detected format")]
    assert returncode == 130 and len(lines) == 1, (returncode, err[-3000:])
    if "interrupted; nothing was committed" in lines[0]:
        assert store_digest(db) == before
        return "nothing committed"
    assert f"interrupted after the import was committed: run 'big' has its {n} new rollouts" in lines[0], (
        lines
    )
    assert _consistent(db, n) == "complete"
    return "committed, said so"


def test_ctrl_c_during_import_commits_nothing_or_says_what_it_committed(db_with_base, tmp_path):
    db = db_with_base
    big = _big_jsonl(tmp_path / "big.jsonl", n_records=4000)
    before = store_digest(db)
    child = subprocess.Popen(
        [PYTHON, "-c", CLI_CHILD, "import", str(big), "--db", str(db), "--run", "big"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "ready"
    time.sleep(0.3)  # inside the import by now: it runs for seconds
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=60)
    if child.returncode == 0:  # it finished before the signal landed
        assert _consistent(db, 4000) == "complete"
        outcome = "completed"
    else:
        outcome = _ctrl_c_outcome(child.returncode, err, db, before, 4000)
    tally("Ctrl-C during import", outcome)


# The import's last COMMIT, where Ctrl-C used to end in a traceback ("Query interrupted", exit 1) or in
# "nothing was committed" over a committed run: the signal is sent from inside the child, at one point.
CTRL_C_AT = textwrap.dedent(
    """
    import os, signal, sys, threading
    import duckdb
    from backend import cli
    from backend.cli import store as commands

    point, published = sys.argv[1], []
    connect, import_path = duckdb.connect, commands.import_path

    def ctrl_c():
        os.kill(os.getpid(), signal.SIGINT)

    class Connection:  # the store's DuckDB connection, sending the signal at `point`
        def __init__(self, con):
            self._con = con

        def __getattr__(self, name):
            return getattr(self._con, name)

        def execute(self, sql, *args):
            published.extend(["publish"] if sql.startswith("UPDATE runs SET name") else [])
            last = published and sql == "COMMIT"
            if last and point == "inside the COMMIT":  # lands while DuckDB commits
                threading.Timer(0.001, ctrl_c).start()
            result = self._con.execute(sql, *args)
            if last and point == "just after the COMMIT":
                ctrl_c()
            return result

    def import_then_ctrl_c(*args, **kwargs):
        report = import_path(*args, **kwargs)
        if point == "after the import returned":
            ctrl_c()
        return report

    duckdb.connect = lambda *args, **kwargs: Connection(connect(*args, **kwargs))
    commands.import_path = import_then_ctrl_c
    cli.build_parser()
    sys.exit(cli.main(sys.argv[2:]))
    """
)


@pytest.mark.parametrize("point", ["inside the COMMIT", "just after the COMMIT", "after the import returned"])
def test_ctrl_c_at_the_import_commit_says_truthfully_what_was_committed(db_with_base, tmp_path, point):
    db = db_with_base
    big = _big_jsonl(tmp_path / "big.jsonl", n_records=400)
    before = store_digest(db)
    args = ["import", str(big), "--db", str(db), "--run", "big", "--quiet"]
    proc = subprocess.run(
        [PYTHON, "-c", CTRL_C_AT, point, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    outcome = _ctrl_c_outcome(proc.returncode, proc.stderr, db, before, 400)
    if point != "inside the COMMIT":  # the COMMIT surely landed: saying "nothing" would be false
        assert outcome == "committed, said so"
    tally(f"Ctrl-C {point} of an import", outcome)
