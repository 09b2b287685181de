"""Real logs: TRL's own GRPOTrainer writes completion logs in the suite; verl dumps are written the way
verl's code writes them (see verl_dumps.py). Every command runs on the imported runs."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from backend.ingest import import_path
from backend.store import Store
from tests.conftest import run_cli_here

from .trl_logs import DEMO_POLICY, NUM_GENERATIONS, PROMPTS_PER_STEP
from .verl_dumps import GROUPS, legacy_step, v1_step

ROOT = Path(__file__).resolve().parents[3]
STEPS = 2


@pytest.fixture(scope="session")
def trl_logs(trl_plain_log, trl_conversational_log) -> dict[str, Path]:
    """Completion logs of two real 2-step GRPO runs (plain and conversational; tests/conftest.py)."""
    return {"plain": trl_plain_log, "conversational": trl_conversational_log}


def _table(directory: Path) -> pd.DataFrame:
    return pd.concat(
        [pq.read_table(f).to_pandas() for f in sorted(directory.glob("completions_*.parquet"))],
        ignore_index=True,
    )


def _scores(store: Store, run: str) -> pd.DataFrame:
    return store.con.execute(
        "SELECT o.rollout_id, s.channel, s.score FROM scores s JOIN rollouts o USING (run_id, rollout_id) "
        "WHERE o.run_id = ? ORDER BY 1, 2",
        [store.run_id(run)],
    ).df()


@pytest.mark.slow
def test_trl_plain_log_imports_faithfully(trl_logs, db_path):
    logs = _table(trl_logs["plain"])
    n = STEPS * PROMPTS_PER_STEP * NUM_GENERATIONS
    assert len(logs) == n and logs["digits_reward"].isna().any() and logs["n_chars"].dtype == np.int64
    with Store(db_path) as store:
        report = import_path(store, trl_logs["plain"].parent, "trl", model_dir=str(DEMO_POLICY))
        text = report.message()
        assert report.records == n and report.format == "trl"
        assert (
            "channels: digits_reward, newline_reward; metrics (per rollout, not rewards): n_chars; "
            "kept in meta: first_char"
        ) in text
        assert "split into blocks of 4" in text  # the repeated prompt's 8 rows are two TRL groups
        unscorable = logs[["digits_reward", "newline_reward"]].isna().all(axis=1)
        assert report.unscorable == int(unscorable.sum()) > 0
        index = store.rollout_index("trl")
        # text and steps as logged, in order; groups are TRL's consecutive blocks of num_generations
        assert index["response"].tolist() == logs["completion"].tolist()
        assert index["step"].tolist() == logs["step"].tolist() == sorted(logs["step"])
        assert index["group_id"].tolist() == [i // NUM_GENERATIONS for i in range(n)]
        assert index.loc[0, "prompt"] == index.loc[4, "prompt"]  # same prompt text, two groups
        # rewards: a score row per non-NaN value, none for NaN (never a silent 0)
        scores = _scores(store, "trl")
        for channel in ("digits_reward", "newline_reward"):
            got = scores[scores.channel == channel].set_index("rollout_id")["score"]
            want = logs[channel].dropna()
            assert got.index.tolist() == want.index.tolist() and np.allclose(got.values, want.values)
        assert set(scores.rollout_id) == set(np.flatnonzero(~unscorable.values))
        # numeric log_extra columns are per-rollout metrics, the others stay in meta; the advantage as logged
        for i in (0, 5, n - 1):
            row = store.rollout("trl", i)
            assert row["metrics"] == {"n_chars": float(logs.loc[i, "n_chars"])}
            assert "n_chars" not in row["meta"]
            assert row["meta"]["first_char"] == logs.loc[i, "first_char"]
            assert row["logged_advantage"] == pytest.approx(logs.loc[i, "advantage"], abs=1e-12)
        batch = store.load_batch("trl")
        assert math.isnan(float(batch.scores["digits_reward"][0]))


@pytest.mark.slow
def test_channel_all_reproduces_trls_logged_advantage(trl_logs, db_path, tmp_path):
    with Store(db_path) as store:
        import_path(store, trl_logs["plain"], "trl", model_dir=str(DEMO_POLICY))
        import_path(store, trl_logs["conversational"], "conv", model_dir=str(DEMO_POLICY))
    for run, kind in (("trl", "plain"), ("conv", "conversational")):
        logs = _table(trl_logs[kind])
        out = tmp_path / f"{run}.parquet"
        assert (
            run_cli_here(
                "estimate",
                "--db",
                db_path,
                "--run",
                run,
                "--estimator",
                "grpo",
                "--channel",
                "all",
                "--set",
                "epsilon=1e-4",
                "--out",
                out,
            ).returncode
            == 0
        )
        per_rollout = pd.read_parquet(out).groupby("rollout_id")["advantage"].first()
        assert np.abs(per_rollout.values - logs["advantage"].values[per_rollout.index]).max() < 1e-6
        # without --estimator: the credit as TRL trained it (its recipe rebuilt), equal to its log
        assert run_cli_here("estimate", "--db", db_path, "--run", run, "--out", out).returncode == 0
        trained = pd.read_parquet(out).groupby("rollout_id")["advantage"].first()
        assert np.abs(trained.values - logs["advantage"].values[trained.index]).max() < 1e-6
        done = run_cli_here("estimate", "--db", db_path, "--run", run, "--estimator", "logged", "--out", out)
        assert done.returncode == 0
        logged = pd.read_parquet(out).groupby("rollout_id")["advantage"].first()
        assert np.allclose(logged.values, logs["advantage"].values[logged.index], atol=1e-6)
        gap = tmp_path / f"{run}-gap.parquet"
        assert (
            run_cli_here(
                "logged-gap",
                "--db",
                db_path,
                "--run",
                run,
                "--channel",
                "all",
                "--set",
                "epsilon=1e-4",
                "--out",
                gap,
            ).returncode
            == 0
        )
        frame = pd.read_parquet(gap)
        assert len(frame) == len(logs) and frame["gap"].abs().max() < 1e-6
        # the import keeps TRL's epsilon, which the gap command recomputes with by default (before: grpo's
        # 1e-6, a gap of up to 3e-4); another epsilon, asked for, shows its difference per rollout
        done = run_cli_here(
            "logged-gap",
            "--db",
            db_path,
            "--run",
            run,
            "--estimator",
            "grpo",
            "--channel",
            "all",
            "--out",
            gap,
        )
        assert done.returncode == 0 and "the trainer's epsilon=0.0001" in done.stderr
        assert pd.read_parquet(gap)["gap"].abs().max() < 1e-6
        args = ["--estimator", "grpo", "--channel", "all", "--set", "epsilon=1e-6", "--out", gap]
        assert run_cli_here("logged-gap", "--db", db_path, "--run", run, *args).returncode == 0
        assert pd.read_parquet(gap)["gap"].abs().max() > 1e-6


@pytest.mark.slow
def test_trl_conversational_log_keeps_messages(trl_logs, db_path):
    logs = _table(trl_logs["conversational"])
    with Store(db_path) as store:
        import_path(store, trl_logs["conversational"], "conv", model_dir=str(DEMO_POLICY))
        row = store.rollout("conv", 2)
        completion = list(logs.loc[2, "completion"])
        assert row["response"] == completion[0]["content"] and completion[0]["role"] == "assistant"
        assert row["meta"]["completion_messages"] == [dict(m) for m in completion]
        assert row["meta"]["prompt_messages"] == [dict(m) for m in logs.loc[2, "prompt"]]
        assert row["prompt"] == f"user: {logs.loc[2, 'prompt'][0]['content']}\n"
        # tokens are the response's characters (the demo tokenizer), not JSON syntax
        assert "".join(row["tokens"]) == row["response"] and '"role"' not in row["response"]
        raw = store.con.execute(
            "SELECT meta FROM rollouts WHERE rollout_id = 2 AND run_id = ?", [store.run_id("conv")]
        ).fetchall()[0][0]
        assert "\\u" not in raw and "\\n" in raw  # real JSON: a newline is \n, no ASCII escapes


@pytest.mark.slow
def test_trl_channels_and_group_size_flags(trl_logs, db_path):
    directory = trl_logs["plain"]
    done = run_cli_here(
        "import",
        directory,
        "--db",
        db_path,
        "--run",
        "one",
        "--channels",
        "newline_reward",
        "--group-size",
        "4",
        "--quiet",
    )
    assert done.returncode == 0
    out = done.stdout
    assert (
        "channels: newline_reward -> task; metrics (per rollout, not rewards): digits_reward, n_chars; "
        "kept in meta: first_char"
    ) in out
    assert "blocks of 4 consecutive rows (--group-size)" in out
    with Store(db_path, read_only=True) as store:
        assert store.list_runs()[0]["channels"] == ["task"]
        logs = _table(directory)
        # a reward column left out of --channels is a metric: NaN (the function returned None) is no value
        metric = [store.rollout("one", i)["metrics"].get("digits_reward") for i in range(len(logs))]
        assert metric == [None if math.isnan(v) else v for v in logs["digits_reward"]]
        assert store.load_batch("one").group_ids.tolist() == [i // 4 for i in range(24)]
    done = run_cli_here(
        "import", directory, "--db", db_path, "--run", "eight", "--group-size", "8", "--quiet"
    )
    assert done.returncode == 2
    assert "not a multiple of --group-size 8" in done.stderr
    done = run_cli_here("import", directory, "--db", db_path, "--run", "x", "--channels", "nope", "--quiet")
    assert done.returncode == 2
    assert "--channels names nope" in done.stderr
    with Store(db_path, read_only=True) as store:
        assert [r["name"] for r in store.list_runs()] == ["one"]  # nothing written by the failures


@pytest.mark.slow
def test_reimport_by_any_path_adds_nothing(trl_logs, db_path, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(trl_logs["plain"].parent / "completions", out / "completions")
    first, second = sorted((out / "completions").glob("*.parquet"))
    grow = tmp_path / "grow" / "completions"
    grow.mkdir(parents=True)
    shutil.copy(first, grow)
    with Store(db_path) as store:
        assert import_path(store, grow.parent, "r").records == 12  # the run directory at step 1
        shutil.copy(second, grow)  # the run wrote step 2
        grown = import_path(store, grow.parent, "r")
        assert (grown.records, grown.skipped) == (12, 12) and "skipped 12 records" in grown.message()
        for path in (out, out / "completions", first, second):  # a directory, its subdirectory, a file
            report = import_path(store, path, "r")
            assert report.records == 0 and (report.skipped > 0 or report.already_imported), path
            assert "nothing added" in report.message()
        assert store.list_runs()[0]["rollouts"] == 24
        assert store.load_batch("r").group_ids.tolist() == [i // 4 for i in range(24)]


@pytest.mark.slow
def test_every_command_on_an_imported_trl_run(trl_logs, db_path, tmp_path):
    done = run_cli_here(
        "import", trl_logs["plain"], "--db", db_path, "--run", "trl", "--model", DEMO_POLICY, "--quiet"
    )
    assert done.returncode == 0
    out = tmp_path / "e.parquet"
    done = run_cli_here("estimate", "--db", db_path, "--run", "trl", "--estimator", "entropy", "--out", out)
    assert done.returncode == 2
    assert "creditlens score --model" in done.stderr
    assert run_cli_here("score", "--db", db_path, "--run", "trl", "--model", DEMO_POLICY).returncode == 0
    assert (
        run_cli_here(
            "estimate",
            "--db",
            db_path,
            "--run",
            "trl",
            "--estimator",
            "entropy",
            "--channel",
            "digits_reward",
            "--out",
            out,
        ).returncode
        == 0
    )
    frame = pd.read_parquet(out)
    assert np.isfinite(frame["advantage"]).all() and frame["advantage"].abs().sum() > 0
    # an unscorable rollout gets advantage 0 on every channel
    assert (frame[frame.rollout_id == 0]["advantage"] == 0).all()
    assert (
        run_cli_here(
            "resample",
            "--db",
            db_path,
            "--run",
            "trl",
            "--rollout",
            "2",
            "--positions",
            "1,3",
            "--samples",
            "2",
            "--verifier",
            "tests.backend.ingest.trl_logs:has_newline",
            "--json",
        ).returncode
        == 0
    )
    with Store(db_path, read_only=True) as store:
        assert sorted(set(store.resample_samples("trl", 2)["pos"])) == [1, 3]
    done = run_cli_here("runs", "--db", db_path, "--json")
    assert done.returncode == 0
    assert json.loads(done.stdout)[0]["channels"] == ["digits_reward", "newline_reward"]
    # TRL's numeric log_extra column is an Explorer column (`rollouts`) and a Trends mean (`trends`)
    logs = _table(trl_logs["plain"])
    done = run_cli_here("rollouts", "--db", db_path, "--run", "trl", "--json")
    assert done.returncode == 0
    rows = json.loads(done.stdout)
    assert [r["metric_n_chars"] for r in rows] == logs["n_chars"].astype(float).tolist()
    done = run_cli_here("trends", "--db", db_path, "--run", "trl", "--json")
    assert done.returncode == 0
    trends = json.loads(done.stdout)
    means = logs.groupby("step")["n_chars"].mean().tolist()
    assert [t["metric_n_chars"] for t in trends] == pytest.approx(means)


def _verl_dir(tmp_path: Path, v1: bool, steps=(1, 2)) -> Path:
    directory = tmp_path / ("v1" if v1 else "legacy")
    for step in steps:
        (v1_step if v1 else legacy_step)(directory, step)
    return directory


@pytest.mark.parametrize("v1", [False, True], ids=["legacy", "v1"])
def test_verl_dump_imports_faithfully(db_path, tmp_path, v1):
    directory = _verl_dir(tmp_path, v1)
    lines = [json.loads(x) for f in sorted(directory.glob("*.jsonl")) for x in f.read_text().splitlines()]
    with Store(db_path) as store:
        report = import_path(store, directory, "v")
        assert report.records == len(lines) == 18
        index = store.rollout_index("v")
        assert index["response"].tolist() == [x["output"] for x in lines]
        assert index["task"].tolist() == [x["score"] for x in lines]
        sizes = index.groupby("group_id").size()
        if v1:  # uid groups: the repeated prompt's two groups stay two
            assert "groups: by uid" in report.message() and sizes.tolist() == [3] * 6
            assert store.rollout("v", 0)["meta"]["uid"] == lines[0]["uid"]
        else:  # no uid: prompt text and step (the repeated prompt's groups merge)
            assert sizes.tolist() == [6, 3] * 2
            assert store.rollout("v", 4)["meta"]["request_id"] == lines[4]["request_id"]
            assert "acc" not in index.columns  # verl's reward_extra_info is a metric, not a channel
            acc = [store.rollout("v", i)["metrics"]["acc"] for i in range(18)]
            assert acc == [float(x["acc"]) for x in lines]
        truth = store.rollout("v", 6 if not v1 else [i for i, x in enumerate(lines) if x["gts"] != "46"][0])
        assert truth["ground_truth"] == json.dumps(GROUPS[2][2], ensure_ascii=False)
        assert json.loads(truth["ground_truth"]) == ["12", "12.0"]


def test_every_command_on_an_imported_verl_run(db_path, tmp_path):
    directory = _verl_dir(tmp_path, v1=True)
    done = run_cli_here("import", directory, "--db", db_path, "--run", "v", "--model", DEMO_POLICY, "--quiet")
    assert done.returncode == 0
    assert run_cli_here("score", "--db", db_path, "--run", "v", "--model", DEMO_POLICY).returncode == 0
    out = tmp_path / "e.parquet"
    for estimator in ("grpo", "entropy", "gae"):
        done = run_cli_here("estimate", "--db", db_path, "--run", "v", "--estimator", estimator, "--out", out)
        assert done.returncode == 0
        assert np.isfinite(pd.read_parquet(out)["advantage"]).all()
    assert (
        run_cli_here(
            "resample",
            "--db",
            db_path,
            "--run",
            "v",
            "--rollout",
            "0",
            "--positions",
            "2",
            "--samples",
            "2",
            "--json",
        ).returncode
        == 0
    )
    done = run_cli_here("estimate", "--db", db_path, "--run", "v", "--estimator", "suffix_mc", "--out", out)
    assert done.returncode == 0
    done = run_cli_here("runs", "--db", db_path, "--json")
    assert done.returncode == 0
    assert json.loads(done.stdout)[0]["groups"] == 6  # 3 uid groups per step
    done = run_cli_here("import", directory, "--db", db_path, "--run", "v", "--quiet")
    assert done.returncode == 0
    assert "nothing added" in done.stdout


def test_follow_imports_each_new_step_until_interrupted(db_path, tmp_path):
    directory = tmp_path / "rollout_data_dir"
    directory.mkdir()
    legacy_step(directory, 1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "backend.cli",
            "import",
            str(directory),
            "--db",
            str(db_path),
            "--run",
            "live",
            "--format",
            "verl",
            "--follow",
            "--poll",
            "0.2",
            "--quiet",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C must reach the follower even when pytest itself runs in the background of a shell, which
        # starts it with SIGINT ignored (a disposition children inherit): the follower then never stopped
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:

        def rollouts() -> int:
            try:
                with Store(db_path, read_only=True) as store:
                    return store.list_runs()[0]["rollouts"] if store.has_run("live") else 0
            except Exception:  # noqa: BLE001 - the follower holds the write lock for a moment
                return -1

        def wait_for(count: int) -> None:
            deadline = time.monotonic() + 60
            while rollouts() != count:
                assert proc.poll() is None, proc.stderr.read()
                assert time.monotonic() < deadline, f"expected {count} rollouts, have {rollouts()}"
                time.sleep(0.2)

        wait_for(9)
        legacy_step(directory, 2)
        wait_for(18)
        with open(directory / "3.jsonl", "w") as fh:  # a step file still being written is not imported
            fh.write(json.dumps({"input": "1+1=?\n", "output": "#### 2", "score": 1.0, "step": 3}))
        time.sleep(1.0)
        assert rollouts() in (18, -1)
        with open(directory / "3.jsonl", "a") as fh:
            fh.write("\n")
        wait_for(19)
    finally:
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "1.jsonl: live: imported 9 rollouts" in stdout and "3.jsonl: live: imported 1 rollouts" in stdout
    assert "stopped following" in stdout and "19 rollouts from 3 files" in stdout


@pytest.mark.parametrize(
    "raised",
    [KeyboardInterrupt(), RuntimeError("Query interrupted"), "duckdb"],
    ids=["python", "duckdb runtime error", "duckdb interrupt exception"],
)
def test_follow_stops_cleanly_when_ctrl_c_lands_inside_a_query(
    db_path, tmp_path, monkeypatch, capsys, raised
):
    """Ctrl-C while the follower is in a DuckDB query (its poll, the monitors after a step) reaches it as
    DuckDB's exception, not Python's KeyboardInterrupt: it still stops following and says what it imported."""
    import duckdb  # noqa: PLC0415

    from backend.cli import store as cli_store  # noqa: PLC0415

    real_follow = cli_store.follow

    def follow_then_ctrl_c(*args, on_report, **kwargs):
        def report_then_ctrl_c(rep, path):
            on_report(rep, path)
            raise duckdb.InterruptException("INTERRUPT Error: Interrupted!") if raised == "duckdb" else raised

        return real_follow(*args, on_report=report_then_ctrl_c, **kwargs)

    monkeypatch.setattr(cli_store, "follow", follow_then_ctrl_c)
    directory = tmp_path / "rollout_data_dir"
    directory.mkdir()
    legacy_step(directory, 1)
    args = ["import", str(directory), "--db", str(db_path), "--run", "live", "--format", "verl", "--follow"]
    done = run_cli_here(*args, "--poll", "0.2", "--quiet")
    assert done.returncode == 0, done.stderr
    assert "stopped following" in done.stdout and "from 1 files" in done.stdout, done
    assert "nothing was committed" not in done.stderr
    with Store(db_path, read_only=True) as store:
        assert store.list_runs()[0]["rollouts"] > 0
