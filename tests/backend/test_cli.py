"""The command line as users run it: real subprocesses, real files."""

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_test_port, make_records, write_jsonl

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "backend.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_import_runs_delete_round_trip(tmp_path):
    db = tmp_path / "s.duckdb"
    path = write_jsonl(tmp_path / "r.jsonl", make_records(n_groups=2, group_size=4))
    done = run_cli("import", str(path), "--db", str(db), "--run", "mine", "--quiet")
    assert done.returncode == 0, done.stderr
    assert "detected format: native" in done.stderr and "imported 8 rollouts" in done.stdout
    runs = json.loads(run_cli("runs", "--db", str(db), "--json").stdout)
    assert [(r["name"], r["rollouts"], r["groups"]) for r in runs] == [("mine", 8, 2)]
    again = run_cli("import", str(path), "--db", str(db), "--run", "mine", "--quiet")
    assert again.returncode == 0 and "nothing added" in again.stdout
    assert run_cli("delete", "--db", str(db), "--run", "mine").returncode == 0
    assert json.loads(run_cli("runs", "--db", str(db), "--json").stdout) == []


def test_bad_input_is_one_line_exit_2_no_traceback(tmp_path):
    db = tmp_path / "s.duckdb"
    path = write_jsonl(tmp_path / "bad.jsonl", [json.dumps(make_records()[0]), '{"prompt": 1}'])
    done = run_cli("import", str(path), "--db", str(db), "--run", "x", "--quiet")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.jsonl: line 2" in lines[0] and "'prompt'" in lines[0]
    assert "Traceback" not in done.stderr


def test_init_imports_bundled_runs_once(tmp_path):
    db = tmp_path / "s.duckdb"
    first = run_cli("init", "--db", str(db))
    assert first.returncode == 0, first.stderr
    names = {r["name"] for r in json.loads(run_cli("runs", "--db", str(db), "--json").stdout)}
    bundled = {json.loads(p.read_text())["run"] for p in (ROOT / "sample_runs").glob("*.json")}
    assert names == bundled
    second = run_cli("init", "--db", str(db))
    assert "already there" in second.stdout


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


@pytest.mark.slow
def test_app_serves_and_stopping_the_command_stops_the_server(bundled_db):
    """`creditlens app` hands its arguments to app/server/launch.py, which starts Streamlit; a SIGTERM to the
    command reaches both, so no server is left behind. (A copy of the bundled store and no warm-up: the start
    and the stop are the point; .ci/first_touch.py starts `make app` on a new store.)"""
    port = free_test_port()
    command = [sys.executable, "-m", "backend.cli", "app", "--db", str(bundled_db), "--port", str(port)]
    env = dict(os.environ, CREDITLENS_WARMUP="0")
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 120
        while not _answers(port):
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.5)
        proc.terminate()
        assert proc.wait(timeout=30) is not None
        deadline = time.monotonic() + 30
        while _answers(port) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _answers(port), "the Streamlit server outlived the command"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_app_help_is_the_launchers():
    done = run_cli("app", "--help")
    assert done.returncode == 0 and "usage: creditlens app" in done.stdout and "--import-root" in done.stdout
