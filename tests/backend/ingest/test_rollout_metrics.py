"""Per-rollout metrics (migration 008): verl's reward_extra_info keys and TRL's numeric `log_extra` columns
are numbers logged beside the reward, never channels. They reach the Explorer's table (`creditlens
rollouts`, filterable) and Trends (`creditlens
trends`) through `backend.views.explorer`, and never the credit."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import creditlens
from backend.core.errors import InputError
from backend.ingest import import_path, import_records
from backend.store import Store
from tests.conftest import run_cli_here, write_jsonl

from .verl_dumps import v1_step


def _v1_dump(tmp_path: Path) -> tuple[Path, list[dict]]:
    directory = tmp_path / "rollout_data_dir"
    for step in (1, 2):
        v1_step(directory, step, acc=True)
    lines = [json.loads(x) for f in sorted(directory.glob("*.jsonl")) for x in f.read_text().splitlines()]
    return directory, lines


def _json(result) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_verl_acc_is_a_metric_and_the_credit_is_the_scores_alone(db_path, tmp_path):
    """Before: `acc` was a channel with β = 1, so GRPO's final advantage was acc's plus score's (1.732 where
    the task alone gives 0.866)."""
    directory, lines = _v1_dump(tmp_path)
    assert all(isinstance(x["acc"], bool) for x in lines)
    result = run_cli_here("import", directory, "--db", db_path, "--run", "v", "--quiet")
    assert result.returncode == 0, result.stderr
    summary = "channels: score -> task; metrics (per rollout, not rewards): acc; kept in meta: uid"
    assert summary in result.stdout
    runs = _json(run_cli_here("runs", "--db", db_path, "--json"))
    assert runs[0]["channels"] == ["task"]
    explained = _json(
        run_cli_here(
            "explain", "--db", db_path, "--run", "v", "--rollout", "0", "--estimator", "grpo", "--json"
        )
    )
    assert list(explained["channels"]) == ["task"] and explained["betas"] == {"task": 1.0}
    sequence = explained["terms"]["sequence"]
    assert explained["final"][0] == pytest.approx(sequence["Z"]) and sequence["R"] == lines[0]["score"]


def test_runs_list_each_runs_channels_and_metrics(db_path, tmp_path):
    """Before: `creditlens runs --json` and `creditlens.open().runs()` did not say which per-rollout metrics a
    run has (issue 42 item 4)."""
    directory, _ = _v1_dump(tmp_path)
    assert run_cli_here("import", directory, "--db", db_path, "--run", "v", "--quiet").returncode == 0
    promoted = run_cli_here(
        "import", directory, "--db", db_path, "--run", "p", "--channels", "score,acc", "--quiet"
    )
    assert promoted.returncode == 0, promoted.stderr
    runs = {r["name"]: r for r in _json(run_cli_here("runs", "--db", db_path, "--json"))}
    assert (runs["v"]["channels"], runs["v"]["metrics"]) == (["task"], ["acc"])
    assert (runs["p"]["channels"], runs["p"]["metrics"]) == (["acc", "task"], [])
    table = run_cli_here("runs", "--db", db_path).stdout.splitlines()
    assert table[0].split()[-2:] == ["channels", "metrics"]
    assert table[1].split()[-2:] == ["task", "acc"] and table[2].split()[-2:] == ["acc,task", "-"]
    frame = creditlens.open(db_path).runs()
    assert frame.set_index("name")["metrics"].to_dict() == {"v": ["acc"], "p": []}
    assert frame.set_index("name")["channels"].to_dict() == {"v": ["task"], "p": ["acc", "task"]}
    empty = tmp_path / "empty.duckdb"
    Store(empty).close()
    assert list(creditlens.open(empty).runs().columns) == list(frame.columns)  # before: no columns at all
    assert {"channels", "metrics"} <= set(frame.columns)


def test_metrics_are_explorer_columns_filters_and_trends(db_path, tmp_path):
    directory, lines = _v1_dump(tmp_path)
    with Store(db_path) as store:
        import_path(store, directory, "v")
    rows = _json(run_cli_here("rollouts", "--db", db_path, "--run", "v", "--json"))
    assert [r["metric_acc"] for r in rows] == [float(x["acc"]) for x in lines]
    assert list(rows[0])[:6] == ["rollout_id", "step", "group_id", "length", "score_task", "metric_acc"]
    hits = _json(
        run_cli_here(
            "rollouts",
            "--db",
            db_path,
            "--run",
            "v",
            "--where",
            "metric_acc=1",
            "--sort=-metric_acc",
            "--json",
        )
    )
    assert len(hits) == sum(x["acc"] for x in lines) and all(r["metric_acc"] == 1.0 for r in hits)
    trends = _json(run_cli_here("trends", "--db", db_path, "--run", "v", "--estimator", "grpo", "--json"))
    frame = pd.DataFrame(lines)
    want = frame.groupby("step")["acc"].mean().tolist()
    assert [t["metric_acc"] for t in trends] == pytest.approx(want)
    assert all("share_other" in t for t in trends)  # the credit columns beside them


def test_channels_still_promote_a_key(db_path, tmp_path):
    directory, lines = _v1_dump(tmp_path)
    result = run_cli_here(
        "import", directory, "--db", db_path, "--run", "v", "--channels", "score,acc", "--quiet"
    )
    assert result.returncode == 0, result.stderr
    assert "channels: score -> task, acc; kept in meta: uid" in result.stdout
    with Store(db_path, read_only=True) as store:
        assert store.list_runs()[0]["channels"] == ["acc", "task"]
        assert store.rollout("v", 0)["metrics"] == {}
    rows = _json(run_cli_here("rollouts", "--db", db_path, "--run", "v", "--json"))
    assert "metric_acc" not in rows[0] and rows[0]["score_acc"] == float(lines[0]["acc"])


def test_native_metrics_field(store, tmp_path):
    base = {"prompt": "p", "response": "a b", "token_ids": [1, 2], "rewards": {"task": 1.0}}
    records = [{**base, "metrics": {"acc": True, "n chars": 3, "missing": None}}, {**base, "metrics": {}}]
    import_path(store, write_jsonl(tmp_path / "r.jsonl", records), "r")
    assert store.rollout("r", 0)["metrics"] == {"acc": 1.0, "n chars": 3.0}
    assert store.rollout("r", 1)["metrics"] == {}
    bad_ones = (({"acc": "yes"}, "metrics.acc"), (["acc"], "metrics"), ({"x": float("inf")}, "metrics.x"))
    for bad, field in bad_ones:
        with pytest.raises(InputError, match=rf"record 1: field '{field}'"):
            import_records(store, f"bad-{field}", [{**base, "metrics": bad}])
        assert not store.has_run(f"bad-{field}")


def test_a_nan_metric_in_a_verl_dump_is_no_value(store, tmp_path):
    """verl writes its dumps with json.dumps, which writes a float NaN as the literal NaN."""
    path = tmp_path / "1.jsonl"
    path.write_text('{"input": "q", "output": "a", "score": 1.0, "step": 1, "acc": NaN, "len": 3}\n')
    import_path(store, path, "v", fmt="verl")
    assert store.rollout("v", 0)["metrics"] == {"len": 3.0}
