"""`--ray ADDRESS` on a real Ray cluster of two nodes started on this machine (`ray start --head`, then a
second `ray start --address`): a whole-run estimate and an import computed as Ray tasks give the same
bytes and rows as one process. Skipped, saying why, where Ray cannot start a cluster here."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from backend.ingest import import_records, native, split_import
from backend.ingest.pipeline import CHUNK_RECORDS, CHUNK_TOKENS
from backend.store import Store
from bench.scale import write_run
from tests.conftest import make_records

ROOT = Path(__file__).resolve().parents[2]
RAY = shutil.which("ray", path=os.path.dirname(sys.executable))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(token: str) -> dict[str, str]:
    """The cluster's and the driver's environment: this checkout importable, a token of this test's own (a
    token left in ~/.ray by another cluster would otherwise decide), no usage reporting."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "RAY_USAGE_STATS_ENABLED": "0",
    }


@pytest.fixture(scope="module")
def cluster():
    """The address of a two-node cluster (one CPU each); both nodes are stopped, by their process groups,
    at the end."""
    if RAY is None:
        pytest.skip("the `ray` command is not installed beside this Python")
    token = secrets.token_hex(32)
    env = _env(token)
    temp = tempfile.mkdtemp(prefix="clray")  # short: Ray's socket paths must fit 107 bytes
    port = _free_port()
    address = f"127.0.0.1:{port}"
    started: list[subprocess.Popen] = []
    common = ["--num-cpus=1", "--disable-usage-stats", "--block"]
    try:
        for args in (
            ["--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp}"],
            [f"--address={address}"],
        ):
            # --block: `ray start` stays in the foreground, and its process group holds the node's processes
            started.append(
                subprocess.Popen(
                    [RAY, "start", *args, *common],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
            if not _wait_for_nodes(address, len(started), env):
                pytest.skip(f"ray could not start node {len(started)} of a local cluster at {address}")
        yield address, env
    finally:
        for proc in started:
            _stop_group(proc)
        shutil.rmtree(temp, ignore_errors=True)


def _wait_for_nodes(address: str, nodes: int, env: dict, seconds: float = 120) -> bool:
    """Whether the cluster at `address` counts `nodes` live nodes within `seconds` (Ray starts in seconds on
    an idle machine, far slower on a busy one)."""
    probe = (
        "import ray, sys\nray.init(address=sys.argv[1], log_to_driver=False)\n"
        "print(sum(1 for n in ray.nodes() if n['Alive']))"
    )
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done = subprocess.run(
            [sys.executable, "-c", probe, address], env=env, capture_output=True, text=True, timeout=seconds
        )
        if done.returncode == 0 and done.stdout.strip().splitlines()[-1:] == [str(nodes)]:
            return True
        time.sleep(2)
    return False


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGKILL to the node's process group: a node of this throwaway cluster has nothing to save, and Ray's
    own shutdown on SIGTERM took 20 s a node on a busy machine (the suite's longest teardown)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    proc.wait(timeout=20)


def _cli(env: dict, *args) -> subprocess.CompletedProcess:
    """`creditlens ARGS` in a process of its own: the driver's connection to the cluster ends with it."""
    return subprocess.run(
        [sys.executable, "-m", "backend.cli", *map(str, args)], env=env, capture_output=True, text=True
    )


def test_estimate_and_import_on_a_two_node_cluster_equal_the_local_run(cluster, tmp_path):
    address, env = cluster
    db = tmp_path / "runs.duckdb"
    with Store(db) as store:
        import_records(store, "multi", make_records(n_groups=6, group_size=4, seed=7, steps=4))
    outs = {}
    for how in (["--workers", "1"], ["--ray", address]):
        out = tmp_path / f"{how[0][2:]}.parquet"
        done = _cli(env, "estimate", "--db", db, "--run", "multi", "--estimator", "stare", "--no-cache", *how,
                    "--out", out)  # fmt: skip
        assert done.returncode == 0, done.stderr
        outs[how[0]] = out.read_bytes()
    assert outs["--ray"] == outs["--workers"]

    source = tmp_path / "run.parquet"
    write_run(source, None, 140_000, mean_len=4)  # ~40,000 rollouts of 1-6 tokens: pieces of 32,768 records
    reader = pq.ParquetFile(source)
    chunk = native.chunk_rows(reader, CHUNK_RECORDS, CHUNK_TOKENS)
    assert len(split_import.parquet_pieces(reader, source, None, chunk)) >= 2  # the import is split
    stored = {}
    for how in (["--workers", "1"], ["--ray", address]):
        target = tmp_path / f"import-{how[0][2:]}.duckdb"
        done = _cli(env, "import", source, "--db", target, "--run", "r", *how)
        assert done.returncode == 0, done.stderr
        with Store(target, read_only=True) as store:
            stored[how[0]] = {
                t: store.con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                for t in ("rollouts", "groups", "scores", "rollout_summary")
            }
    assert len(stored["--workers"]["rollouts"]) == pq.ParquetFile(source).metadata.num_rows
    assert stored["--ray"] == stored["--workers"]
