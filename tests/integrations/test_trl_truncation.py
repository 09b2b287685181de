"""Truncation in a recorded TRL run: a real `GRPOTrainer` (TRL 1.16, the bundled demo policy, CPU) whose
`max_completion_length` cuts some completions and not others. The recorder flags each cut completion as
TRL's own `completions/clipped_ratio` counts it, and the flag reaches `creditlens rollouts --json`,
`creditlens trends` (truncated_share equals TRL's logged ratio per step) and the truncation monitor. The
recorded checkpoint is relative to the recording's folder and the import attaches it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from scripts.record_sample_runs import GENERATIONS, POLICY, PROMPTS, format, task
from tests.conftest import run_cli_here

pytest.importorskip("trl")
pytestmark = pytest.mark.slow

STEPS = 2
PROMPTS_PER_STEP = 2
# The demo policy's answers run 20 to 48 tokens (sample_runs/recorded): cut at 24, some end and some do not.
MAX_COMPLETION_LENGTH = 24


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict:
    from datasets import Dataset  # noqa: PLC0415 - optional: TRL
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415 - heavy, only here
    from trl import GRPOConfig, GRPOTrainer  # noqa: PLC0415 - optional: TRL

    from creditlens.integrations import trl as lens_trl  # noqa: PLC0415 - imports TRL

    base = tmp_path_factory.mktemp("truncation")
    config = GRPOConfig(
        output_dir=str(base / "trainer"),
        max_steps=STEPS,
        per_device_train_batch_size=PROMPTS_PER_STEP * GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=MAX_COMPLETION_LENGTH,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
        shuffle_dataset=False,
        bf16=False,
        disable_dropout=True,
    )
    tokenizer = AutoTokenizer.from_pretrained(POLICY, local_files_only=True)
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(POLICY, local_files_only=True),
        reward_funcs=[task, format],  # both score every completion: every row is recorded
        args=config,
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS]),
        processing_class=tokenizer,
    )
    folder = base / "runs" / "cut"
    recorder = lens_trl.record(trainer, folder)
    trainer.train()
    recorder.close()
    table = pd.concat([pq.read_table(f).to_pandas() for f in recorder.files], ignore_index=True)
    table["meta"] = [json.loads(m) for m in table["meta"]]
    clipped = {e["step"]: e["completions/clipped_ratio"] for e in trainer.state.log_history if "loss" in e}
    db = base / "cut.duckdb"
    done = run_cli_here("import", folder, "--db", db, "--run", "cut", "--quiet")
    assert done.returncode == 0, done.stderr
    stops = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    return {"table": table, "clipped": clipped, "db": db, "folder": folder, "stops": stops}


def test_each_completion_cut_at_the_limit_is_flagged_as_trl_counts_it(recorded):
    table, stops = recorded["table"], recorded["stops"]
    flags = [m["truncated"] for m in table["meta"]]
    # TRL's rule: the completion's last token is neither an end token nor padding (it ran into the limit)
    assert flags == [int(ids[-1]) not in stops for ids in table["token_ids"]]
    lengths = [len(ids) for ids in table["token_ids"]]
    assert {n for n, cut in zip(lengths, flags, strict=True) if cut} == {MAX_COMPLETION_LENGTH}
    assert 0 < sum(flags) < len(flags)  # some cut, some ended
    per_step = table.assign(cut=flags).groupby("step")["cut"].mean()
    assert per_step.to_dict() == pytest.approx(recorded["clipped"])  # TRL's completions/clipped_ratio
    assert sorted(recorded["clipped"]) == list(range(1, STEPS + 1))


def test_rollouts_and_trends_show_the_truncated_completions(recorded):
    db = recorded["db"]
    done = run_cli_here("rollouts", "--db", db, "--run", "cut", "--json")
    assert done.returncode == 0, done.stderr
    rows = sorted(json.loads(done.stdout), key=lambda r: r["rollout_id"])
    assert [r["truncated"] for r in rows] == [m["truncated"] for m in recorded["table"]["meta"]]
    done = run_cli_here("trends", "--db", db, "--run", "cut", "--json")
    assert done.returncode == 0, done.stderr
    shares = {r["step"]: r["truncated_share"] for r in json.loads(done.stdout)}
    assert shares == pytest.approx(recorded["clipped"])
    done = run_cli_here("monitor", "--db", db, "--run", "cut")
    assert done.returncode in (0, 1), done.stderr  # 1: a warning; either way the monitor ran on truncation
    assert "does not record truncation" not in done.stdout + done.stderr


def test_the_checkpoint_is_recorded_relative_and_attached_at_import(recorded):
    first = recorded["table"][recorded["table"]["step"] == 1]
    assert {m["checkpoint"] for m in first["meta"]} == {
        Path(os.path.relpath(POLICY, recorded["folder"].resolve())).as_posix()
    }
    done = run_cli_here("checkpoints", "--db", recorded["db"], "--run", "cut", "--json")
    assert done.returncode == 0, done.stderr
    steps = {s["step"]: (s["checkpoint"], s["exists"]) for s in json.loads(done.stdout)["steps"]}
    # policy step 1's weights were never saved (save_strategy "no"): step 2's checkpoint is unknown
    assert steps == {1: (str(POLICY.resolve()), True), 2: (None, False)}
