"""Every importer on real files into a real DuckDB store."""

import json

import pandas as pd
import pytest

from backend.core.errors import InputError
from backend.ingest import detect_format, import_path, pipeline
from backend.ingest.tokenize import simple_tokenize
from tests.conftest import make_records, snapshot, write_jsonl


def test_native_jsonl_and_parquet_give_the_same_batch(store, tmp_path):
    records = make_records(n_groups=3, group_size=4, steps=2, seed=7)
    write_jsonl(tmp_path / "run.jsonl", records)
    pd.DataFrame(records).to_parquet(tmp_path / "run.parquet")
    a = import_path(store, tmp_path / "run.jsonl", "a")
    b = import_path(store, tmp_path / "run.parquet", "b")
    assert a.records == b.records == 24 and a.tokens == b.tokens
    ba, bb = store.load_batch("a"), store.load_batch("b")
    assert ba.token_ids.equal(bb.token_ids) and ba.group_ids.equal(bb.group_ids)
    assert ba.entropies.allclose(bb.entropies) and ba.token_rewards["style"].equal(bb.token_rewards["style"])
    assert ba.scores["task"].equal(bb.scores["task"]) and ba.tokens == bb.tokens
    assert store.rollout("b", 5)["ground_truth"] == records[5]["meta"]["ground_truth"]


def test_reimport_adds_nothing_and_says_so(store, tmp_path):
    path = write_jsonl(tmp_path / "run.jsonl", make_records())
    first = import_path(store, path, "r")
    before = snapshot(store)
    again = import_path(store, path, "r")
    assert again.already_imported and "already imported" in again.message()
    assert snapshot(store) == before
    assert first.records == 12


def test_second_file_appends_with_stable_ids_and_groups(store, tmp_path):
    import_path(store, write_jsonl(tmp_path / "a.jsonl", make_records(n_groups=2)), "r")
    # another file into the same name is appended on purpose only (backend/ingest/append.py)
    import_path(store, write_jsonl(tmp_path / "b.jsonl", make_records(n_groups=3, seed=9)), "r", append=True)
    index = store.rollout_index("r")
    assert index["rollout_id"].tolist() == list(range(20))
    # same prompt text and step in the second file joins the first file's groups
    assert index["group_id"].nunique() == 3


def test_explicit_group_field_overrides_prompt_grouping(store, tmp_path):
    records = make_records(n_groups=1, group_size=4)
    for i, rec in enumerate(records):
        rec["group"] = i % 2
    import_path(store, write_jsonl(tmp_path / "g.jsonl", records), "r")
    assert store.load_batch("r").group_ids.tolist() == [0, 1, 0, 1]


def test_missing_token_ids_fall_back_to_simple_tokenization(store, tmp_path):
    rec = {"prompt": "p", "response": "Obviously!!! 12 + 3 = 15", "rewards": {"task": 1.0}}
    report = import_path(store, write_jsonl(tmp_path / "t.jsonl", [rec]), "r")
    assert report.tokenization == "simple" and "simple tokenization" in report.message()
    ids, pieces = simple_tokenize(rec["response"])
    assert "".join(pieces) == rec["response"]
    row = store.rollout("r", 0)
    assert row["token_ids"] == ids and row["tokens"] == pieces


def test_verl_directory(store, tmp_path):
    dump = tmp_path / "rollouts"
    dump.mkdir()
    for step in (1, 2):
        lines = [
            {
                "input": f"q{g}",
                "output": f"answer {k}",
                "gts": str(g),
                "score": float(k % 2),
                "step": step,
                "acc": bool(k % 2),
                "pred": "x",
            }
            for g in range(2)
            for k in range(3)
        ]
        write_jsonl(dump / f"{step}.jsonl", lines)
    assert detect_format(dump) == "verl"
    report = import_path(store, dump, "v")
    assert report.format == "verl" and report.records == 12
    (run,) = store.list_runs()
    # verl's extra keys (reward_extra_info) are per-rollout metrics, never channels: only score is a reward
    assert run["channels"] == ["task"] and run["groups"] == 4 and run["steps"] == 2
    row = store.rollout("v", 1)
    assert row["ground_truth"] == "0" and row["meta"]["pred"] == "x" and row["rewards"] == {"task": 1.0}
    assert row["metrics"] == {"acc": 1.0} and "acc" not in row["meta"]


def test_trl_completions(store, tmp_path):
    folder = tmp_path / "completions"
    folder.mkdir()
    frame = pd.DataFrame(
        {
            "step": [5] * 4,
            "prompt": ["p1", "p1", "p2", "p2"],
            "completion": ["a", "b", "c", "d"],
            "accuracy_reward": [1.0, 0.0, 1.0, 1.0],
            "format_reward": [0.5, 0.5, float("nan"), 0.0],
            "advantage": [0.7, -0.7, 0.0, 0.0],
        }
    )
    frame.to_parquet(folder / "completions_00005.parquet")
    assert detect_format(tmp_path) == "trl"
    report = import_path(store, tmp_path, "t")
    assert report.records == 4
    assert store.list_runs()[0]["channels"] == ["accuracy_reward", "format_reward"]
    assert store.rollout("t", 0)["logged_advantage"] == pytest.approx(0.7)
    assert "format_reward" not in store.rollout("t", 2)["rewards"]  # NaN = not applicable


def test_trl_single_reward_function_is_task(store, tmp_path):
    pd.DataFrame(
        {
            "step": [0, 0],
            "prompt": ["p", "p"],
            "completion": ["a", "b"],
            "reward": [1.0, 0.0],
            "advantage": [0.7, -0.7],
        }
    ).to_parquet(tmp_path / "completions_0.parquet")
    import_path(store, tmp_path / "completions_0.parquet", "t")
    assert store.list_runs()[0]["channels"] == ["task"]


BAD_JSONL = [
    ("{not json", "line 1: malformed JSON"),
    (json.dumps({"response": "x", "rewards": {"task": 1}}), "line 1: missing required field 'prompt'"),
    (json.dumps({"prompt": "p", "response": "x"}), "line 1: missing required field 'rewards'"),
    (json.dumps({"prompt": "p", "response": 3, "rewards": {"task": 1}}), "field 'response' must be a string"),
    ('{"prompt": "p", "response": "x", "rewards": {"task": NaN}}', "field 'rewards.task' is nan"),
    (json.dumps({"prompt": "p", "response": "x", "rewards": {"task": 1e400}}), "rewards.task"),
    (
        json.dumps({"prompt": "p", "response": "x", "rewards": {"task": "1"}}),
        "field 'rewards.task' must be a number",
    ),
    (
        json.dumps(
            {"prompt": "p", "response": "x", "token_ids": [1, 2], "logprobs": [-1.0], "rewards": {"task": 1}}
        ),
        "field 'logprobs' has 1 entries but 'token_ids' has 2",
    ),
    (
        json.dumps({"prompt": "p", "response": "x", "token_ids": [1, "a"], "rewards": {"task": 1}}),
        "field 'token_ids'\\[1\\] must be an integer",
    ),
    (
        json.dumps(
            {
                "prompt": "p",
                "response": "x",
                "token_ids": [1],
                "token_rewards": {"style": [1, 2]},
                "rewards": {"task": 1},
            }
        ),
        "field 'token_rewards.style' has 2 entries",
    ),
    (json.dumps({"prompt": "p", "response": "x", "step": -1, "rewards": {"task": 1}}), "field 'step'"),
    (json.dumps([1, 2]), "a record must be a JSON object"),
]


@pytest.mark.parametrize("line,message", BAD_JSONL)
def test_bad_jsonl_names_file_line_field_and_writes_nothing(store, tmp_path, line, message):
    import_path(store, write_jsonl(tmp_path / "ok.jsonl", make_records(n_groups=1)), "keep")
    path = write_jsonl(tmp_path / "bad.jsonl", [line])
    before = snapshot(store)
    with pytest.raises(InputError, match=message) as err:
        import_path(store, path, "new")
    assert str(path) in str(err.value)
    assert snapshot(store) == before


def test_error_on_a_later_line_rolls_back_earlier_chunks(store, tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "CHUNK_RECORDS", 5)  # several chunks are inserted before the bad line
    lines = [json.dumps(r) for r in make_records(n_groups=5, group_size=4)] + ['{"prompt": "p"}']
    path = write_jsonl(tmp_path / "late.jsonl", lines)
    before = snapshot(store)
    with pytest.raises(InputError, match="line 21: missing required field 'response'"):
        import_path(store, path, "r")
    assert snapshot(store) == before


def test_bad_parquet_fast_path_errors(store, tmp_path):
    records = make_records(n_groups=1, group_size=3)
    records[2]["entropies"] = records[2]["entropies"][:-1] + [float("nan")]
    pd.DataFrame(records).to_parquet(tmp_path / "nan.parquet")
    with pytest.raises(InputError, match=r"record 3: field 'entropies' has a NaN"):
        import_path(store, tmp_path / "nan.parquet", "r")
    records = make_records(n_groups=1, group_size=3)
    records[1]["logprobs"] = records[1]["logprobs"] + [0.0]
    pd.DataFrame(records).to_parquet(tmp_path / "len.parquet")
    with pytest.raises(InputError, match=r"record 2: field 'logprobs' has \d+ entries but 'token_ids'"):
        import_path(store, tmp_path / "len.parquet", "r")
    assert store.list_runs() == []


def test_unknown_format_unreadable_and_empty(store, tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(InputError, match="unknown format"):
        import_path(store, tmp_path / "x.csv", "r")
    with pytest.raises(InputError, match="no such file"):
        import_path(store, tmp_path / "missing.jsonl", "r")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(InputError, match="empty.jsonl: no records"):
        import_path(store, tmp_path / "empty.jsonl", "r")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 garbage")
    with pytest.raises(InputError, match="bad.parquet"):
        import_path(store, tmp_path / "bad.parquet", "r")
    assert store.list_runs() == []


def test_invalid_utf8_names_the_line(store, tmp_path):
    path = tmp_path / "u.jsonl"
    path.write_bytes(json.dumps(make_records(n_groups=1)[0]).encode() + b"\n\xff\xfe\n")
    with pytest.raises(InputError, match="line 2: not valid UTF-8"):
        import_path(store, path, "r")
