"""Agent runs (issue 44): native records with `loss_mask`, `turns` and `turn_rewards` import into the store
(JSONL and Parquet), come back in the batch and the rollout, are refused with file, line and field when
malformed, and every estimator gives the untrained tokens exactly 0 in its rows."""

from __future__ import annotations

from importlib import resources

import pandas as pd
import pytest
import torch

from backend.core.errors import InputError
from backend.credit.token_rows import token_rows
from backend.estimators import registry
from backend.ingest import import_path
from tests.conftest import write_jsonl


def agent_record(i: int, score: float) -> dict:
    """user question, assistant call, tool answer, assistant answer: 9 tokens, the tool's 3 untrained."""
    tokens = ["Let", " me", " call", "<tool>", "4", "</tool>", "The", " answer", " 4"]
    return {
        "prompt": "What is 2+2?",
        "response": "".join(tokens),
        "token_ids": [10 + i, 11, 12, 90, 4, 91, 13, 14, 4 + i],
        "tokens": tokens,
        "logprobs": [-0.1 * (k + 1 + i) for k in range(9)],
        "ref_logprobs": [-0.2 * (k + 1) for k in range(9)],
        "entropies": [0.5] * 9,
        "rewards": {"task": score},
        "loss_mask": [1, 1, 1, 0, 0, 0, 1, 1, 1],
        "turns": [
            {"role": "assistant", "start": 0, "end": 3},
            {"role": "tool", "start": 3, "end": 6},
            {"role": "assistant", "start": 6, "end": 9},
        ],
        "turn_rewards": [0.25, score],
    }


RECORDS = [agent_record(i, s) for i, s in enumerate([1.0, 0.0, 1.0, 0.0])]


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_agent_records_import_and_load(store, tmp_path, suffix):
    path = tmp_path / f"agent.{suffix}"
    if suffix == "jsonl":
        write_jsonl(path, RECORDS)
    else:
        pd.DataFrame(RECORDS).to_parquet(path)
    import_path(store, path, "agent")
    batch = store.load_batch("agent")
    assert batch.loss_mask is not None and batch.loss_mask[:, 3:6].sum() == 0 and batch.loss_mask.sum() == 24
    assert batch.turns[0] == [("assistant", 0, 3), ("tool", 3, 6), ("assistant", 6, 9)]
    assert batch.turn_rewards[1] == [0.25, 0.0]
    rollout = store.rollout("agent", 0)
    assert rollout["turns"][1] == {"role": "tool", "start": 3, "end": 6}
    assert rollout["loss_mask"] == [True, True, True, False, False, False, True, True, True]


def test_agent_parquet_with_meta_as_json_text_imports(store, tmp_path):
    """The TRL recorder writes `meta` as JSON text; records with turns take the row-by-row path, which
    refused it ("field 'meta' must be an object, got str") while the fast path read it."""
    path = tmp_path / "agent.parquet"
    pd.DataFrame([dict(r, meta=f'{{"policy_step": {i}}}') for i, r in enumerate(RECORDS)]).to_parquet(path)
    import_path(store, path, "agent")
    assert store.rollout("agent", 2)["meta"]["policy_step"] == 2
    bad = tmp_path / "bad.parquet"
    pd.DataFrame([dict(r, meta="{not json") for r in RECORDS]).to_parquet(bad)
    with pytest.raises(InputError, match="record 1: field 'meta' must be"):
        import_path(store, bad, "bad")


def test_only_a_mask_gives_its_runs_as_turns_and_only_turns_give_the_mask(store, tmp_path):
    masked_only = [{k: v for k, v in r.items() if k not in ("turns", "turn_rewards")} for r in RECORDS]
    turns_only = [{k: v for k, v in r.items() if k != "loss_mask"} for r in RECORDS]
    import_path(store, write_jsonl(tmp_path / "m.jsonl", masked_only), "m")
    import_path(store, write_jsonl(tmp_path / "t.jsonl", turns_only), "t")
    m, t = store.load_batch("m"), store.load_batch("t")
    assert m.turns[0] == [("assistant", 0, 3), ("environment", 3, 6), ("assistant", 6, 9)]
    assert torch.equal(t.loss_mask, store.load_batch("m").loss_mask)


def test_every_estimator_gives_the_tool_tokens_zero_in_its_rows(store, tmp_path):
    """The reproduction of the issue: on the old code every estimator that ran credited the tool tokens."""
    import_path(store, write_jsonl(tmp_path / "a.jsonl", RECORDS), "agent")
    batch = store.load_batch("agent")
    ran = 0
    for name in registry.supported(batch):
        adv = registry.estimate(name, batch).advantages
        assert adv.shape == (4, 9)
        assert torch.equal(adv[:, 3:6], torch.zeros(4, 3)), name
        ran += 1
    assert ran >= 15
    rows = token_rows(batch, registry.estimate("grpo", batch).advantages).to_pandas()
    assert len(rows) == 36  # every real token has its row (what `creditlens estimate` writes), the tool's 0
    tool = rows["pos"].between(3, 5)
    assert (rows[tool]["advantage"] == 0).all() and (rows[~tool]["advantage"] != 0).all()


@pytest.mark.parametrize(
    "change,message",
    [
        ({"loss_mask": [1, 1, 0]}, r"line 1: field 'loss_mask' has 3 entries but 'token_ids' has 9"),
        ({"loss_mask": [1, 1, 1, 2, 0, 0, 1, 1, 1]}, r"line 1: field 'loss_mask'\[3\] must be 0 or 1"),
        (
            {"turns": [{"role": "robot", "start": 0, "end": 9}]},
            r"line 1: field 'turns'\[0\].role must be one",
        ),
        ({"turns": [{"role": "tool", "start": 0, "end": 12}]}, r"field 'turns'\[0\].end = 12 is past"),
        (
            {"turns": [{"role": "tool", "start": 0, "end": 4}, {"role": "assistant", "start": 3, "end": 9}]},
            r"field 'turns'\[1\] spans \[3, 9\): turns must be non-empty, in order and not overlap",
        ),
        ({"turns": "assistant"}, r"field 'turns' must be a list"),
        ({"turn_rewards": [1.0]}, r"field 'turn_rewards' has 1 entries but the response has 2 assistant"),
    ],
)
def test_malformed_agent_fields_are_refused_with_file_line_and_field(store, tmp_path, change, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [{**RECORDS[0], **change}])
    with pytest.raises(InputError, match=message) as err:
        import_path(store, path, "bad")
    assert str(path) in str(err.value)
    assert not store.has_run("bad")


def test_migration_moves_the_old_feature_mask_to_its_column(store, tmp_path):
    """Stores written before migration 12 kept the mask as the per-token feature `loss_mask`: its data
    statements (the columns exist already here) move it to the column, and its turns are the mask's runs."""
    record = {k: v for k, v in RECORDS[0].items() if k not in ("loss_mask", "turns", "turn_rewards")}
    record["extras"] = {"loss_mask": RECORDS[0]["loss_mask"]}
    import_path(store, write_jsonl(tmp_path / "old.jsonl", [record]), "old")
    assert "loss_mask" in store.load_batch("old").extras and store.load_batch("old").loss_mask is None
    sql = (resources.files("backend.store") / "migrations" / "012_agent_turns.sql").read_text()
    code = "\n".join(line for line in sql.splitlines() if not line.startswith("--"))
    with store.transaction() as con:
        for statement in code.split(";"):
            if statement.strip() and not statement.strip().startswith("ALTER"):
                con.execute(statement)
    batch = store.load_batch("old")
    assert "loss_mask" not in batch.extras
    assert batch.loss_mask[0].tolist() == [bool(m) for m in RECORDS[0]["loss_mask"]]
    assert store.rollout("old", 0)["turns"][1] == {"role": "environment", "start": 3, "end": 6}
