"""The TRL recorder on a real `GRPOTrainer` (TRL 1.16, the bundled demo policy, CPU): three steps recorded
while `creditlens watch` follows the folder in another process tree and its Trends page, open in headless
Chromium, shows each new step as it lands (issue 46), then every number checked against its source:
the trainer's advantage (`estimate grpo --channel all`), a rescoring of the recorded tokens with the
recorded checkpoint (logprobs, entropies) and with the initial weights (the reference logprobs)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from backend.ingest.native_writer import StepRecords
from backend.store import Store
from bench.live import SIDEBAR_SAYS, served_url, start_watch
from tests.backend.ingest.trl_logs import DEMO_POLICY, NUM_GENERATIONS, PROMPTS, digits_reward, newline_reward
from tests.conftest import free_test_port, run_cli_here

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3
PROMPTS_PER_STEP = 3

pytest.importorskip("trl")
# One trainer run feeds every test: they stay on one xdist worker (--dist loadgroup) and run in file order.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("trl-recorder")]


def _trainer(output_dir: Path, steps: int = STEPS, save: bool = True):
    from datasets import Dataset  # noqa: PLC0415 - optional: TRL
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415 - heavy, only here
    from trl import GRPOConfig, GRPOTrainer  # noqa: PLC0415 - optional: TRL

    tokenizer = AutoTokenizer.from_pretrained(DEMO_POLICY, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(DEMO_POLICY, local_files_only=True)
    config = GRPOConfig(
        output_dir=str(output_dir),
        max_steps=steps,
        per_device_train_batch_size=PROMPTS_PER_STEP * NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS,
        max_completion_length=16,
        learning_rate=1e-3,
        beta=0.04,
        logging_steps=1,
        report_to=[],
        save_strategy="steps" if save else "no",
        save_steps=1,
        use_cpu=True,
        seed=0,
        temperature=1.0,
        shuffle_dataset=False,
        bf16=False,  # TRL's default autocasts the model to bf16, even on CPU: ~0.04 from a float32 rescoring
        disable_dropout=True,  # the demo policy has dropout 0.1: without this no two passes agree
    )
    return GRPOTrainer(
        model=model,
        reward_funcs=[digits_reward, newline_reward],
        args=config,
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS]),
        processing_class=tokenizer,
    )


def _followed_rollouts(db: Path) -> int:
    try:
        with Store(db, read_only=True) as store:
            return next((r["rollouts"] for r in store.list_runs() if r["name"] == "live"), 0)
    except Exception:  # noqa: BLE001 - the follower (or the app, importing the bundled runs) holds the lock
        return -1


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, browser) -> dict:
    """Train STEPS steps with the recorder while `creditlens watch` follows the folder (import --follow with
    the monitors, and the app on the run). At the end of every step a callback waits until the follower has
    that step's rollouts, and until the run's Trends page, open since the first step, says so without a
    reload: each step lands while the trainer is still running."""
    from transformers import TrainerCallback  # noqa: PLC0415 - heavy, only here

    from creditlens.integrations import trl as lens_trl  # noqa: PLC0415 - imports TRL

    base = tmp_path_factory.mktemp("recorder")
    folder, db, log = base / "runs" / "live", base / "live.duckdb", base / "watch.log"
    trainer = _trainer(base / "trainer")
    recorder = lens_trl.record(trainer, folder, entropies=True)
    watch = start_watch(
        folder,
        db,
        "live",
        log,
        free_test_port(),
        "--poll",
        "0.1",
        env={"PYTHONPATH": str(ROOT)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen_during_training, shown_during_training = [], []
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()

    class WaitForFollower(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            want = sum(pq.ParquetFile(f).metadata.num_rows for f in recorder.files)
            deadline = time.monotonic() + 120
            while _followed_rollouts(db) != want:
                assert watch.poll() is None, log.read_text()
                assert time.monotonic() < deadline, f"the follower has {_followed_rollouts(db)} of {want}"
                time.sleep(0.1)
            seen_during_training.append((state.global_step, want))
            if state.global_step == 1:  # the page opens once, on the run as the first step left it
                page.goto(served_url(log, watch))
                page.evaluate("window.sameDocument = true")
            page.wait_for_function(SIDEBAR_SAYS, arg=f"step {state.global_step} · updated", timeout=60_000)
            shown_during_training.append((state.global_step, page.evaluate("window.sameDocument === true")))

    trainer.add_callback(WaitForFollower())
    try:
        trainer.train()
    finally:
        context.close()
        watch.send_signal(signal.SIGINT)  # Ctrl-C: the follower and the app stop
        watch.wait(timeout=60)
    stdout = log.read_text()
    assert watch.returncode == 0, stdout
    frames = [pq.read_table(f).to_pandas() for f in recorder.files]
    return {
        "trainer": trainer,
        "recorder": recorder,
        "folder": folder,
        "db": db,
        "stdout": stdout,
        "seen": seen_during_training,
        "shown": shown_during_training,
        "table": pd.concat(frames, ignore_index=True),
        "base": base,
    }


def test_each_step_is_written_and_followed_as_it_lands(recorded):
    recorder, table = recorded["recorder"], recorded["table"]
    assert [f.name for f in recorder.files] == [f"step_{s:06d}.parquet" for s in range(1, STEPS + 1)]
    assert not list(recorded["folder"].glob(".*"))  # no temporary file left behind
    # reward functions that return None for some rows: row 0 of every group has no score at all
    per_step = PROMPTS_PER_STEP * NUM_GENERATIONS
    assert recorder.unscorable == STEPS * PROMPTS_PER_STEP
    assert len(table) == STEPS * (per_step - PROMPTS_PER_STEP)
    assert [s for s, _ in recorded["seen"]] == list(range(1, STEPS + 1))
    # the page open since step 1 showed steps 2 and 3 as they landed, without a reload (issue 46)
    assert recorded["shown"] == [(s, True) for s in range(1, STEPS + 1)]
    assert [n for _, n in recorded["seen"]] == [len(table) // STEPS * k for k in range(1, STEPS + 1)]
    assert f"{STEPS * (per_step - PROMPTS_PER_STEP)} rollouts from {STEPS} files" in recorded["stdout"]
    assert {
        "prompt_ids",
        "token_ids",
        "tokens",
        "logprobs",
        "ref_logprobs",
        "entropies",
        "logged_advantage",
        "rewards",
        "group",
        "step",
        "meta",
    } <= set(table.columns)
    meta = [json.loads(m) for m in table["meta"]]
    assert [m["policy_step"] for m in meta] == (table["step"] - 1).tolist()
    assert {(m["advantage_epsilon"], m["scale_rewards"]) for m in meta} == {(1e-4, "group")}  # TRL's
    # checkpoints are named relative to the recording's folder (it moves with them); the follower attached
    # each, resolved against the step file's folder, as the checkpoint that sampled its step
    checkpoints = {m["policy_step"]: m["checkpoint"] for m in meta}
    folders = {0: DEMO_POLICY, **{s: recorded["base"] / "trainer" / f"checkpoint-{s}" for s in (1, 2)}}
    assert checkpoints == {
        s: os.path.relpath(f.resolve(), recorded["folder"].resolve()) for s, f in folders.items()
    }
    assert checkpoints[2] == "../../trainer/checkpoint-2"
    listed = run_cli_here("checkpoints", "--db", recorded["db"], "--run", "live", "--json")
    assert [(s["step"], s["checkpoint"], s["exists"]) for s in json.loads(listed.stdout)["steps"]] == [
        (s + 1, str(f.resolve()), True) for s, f in folders.items()
    ]
    for ids, tokens, response in zip(table["token_ids"], table["tokens"], table["response"], strict=True):
        assert len(ids) == len(tokens) and "".join(tokens).startswith(response)
    with Store(recorded["db"], read_only=True) as store:
        info = store.run_info("live")
        assert set(store.channels_of(store.run_id("live"))) == {"digits_reward", "newline_reward"}
    assert info["source"] and len(table) == _followed_rollouts(recorded["db"])
    # the trainer's args, written beside the step files, are kept with the followed run (issue 45)
    kept = info["meta"]["config"]
    args = recorded["trainer"].args
    assert (kept["beta"], kept["num_generations"], kept["loss_type"]) == (
        args.beta,
        NUM_GENERATIONS,
        args.loss_type,
    )
    assert kept["learning_rate"] == args.learning_rate
    assert info["meta"]["config_source"].startswith("trl args")


def test_grpo_on_all_channels_equals_the_recorded_trainer_advantage(recorded, tmp_path):
    out = tmp_path / "grpo.parquet"
    db = recorded["db"]
    done = run_cli_here(
        "estimate",
        "--db",
        db,
        "--run",
        "live",
        "--estimator",
        "grpo",
        "--channel",
        "all",
        "--set",
        "epsilon=1e-4",
        "--out",
        out,
    )
    assert done.returncode == 0, done.stderr
    per_rollout = pd.read_parquet(out).groupby("rollout_id")["advantage"].first().sort_index()
    logged = recorded["table"]["logged_advantage"].to_numpy()  # rollout ids follow the files' rows
    assert len(per_rollout) == len(logged) and np.abs(logged).max() > 0.5
    np.testing.assert_allclose(per_rollout.to_numpy(), logged, atol=1e-5)
    done = run_cli_here("estimate", "--db", db, "--run", "live", "--estimator", "logged", "--out", out)
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(
        pd.read_parquet(out).groupby("rollout_id")["advantage"].first().sort_index(), logged, atol=1e-6
    )
    # grpo recomputes with the recorded epsilon, without being told (before: grpo's 1e-6)
    done = run_cli_here(
        "logged-gap", "--db", db, "--run", "live", "--estimator", "grpo", "--channel", "all", "--json"
    )
    assert done.returncode == 0 and "epsilon=0.0001" in done.stderr
    assert max(abs(json.loads(line)["gap"]) for line in done.stdout.splitlines()) < 1e-5
    # the default credit is the one TRL trained on: its recipe rebuilt, equal to what it logged
    done = run_cli_here("estimate", "--db", db, "--run", "live", "--out", out)
    assert done.returncode == 0, done.stderr
    trained = pd.read_parquet(out).groupby("rollout_id")["advantage"].first().sort_index()
    np.testing.assert_allclose(trained.to_numpy(), logged, atol=1e-6)
    explained = json.loads(
        run_cli_here("explain", "--db", db, "--run", "live", "--rollout", "0", "--json").stdout
    )
    assert explained["credit"]["kind"] == "as trained" and explained["estimator"] == "as_trained"
    np.testing.assert_allclose(explained["final"][0], logged[0], atol=1e-6)


def test_recorded_logprobs_equal_a_rescoring_with_the_recorded_weights(recorded):
    from backend.models.transformers_engine import TransformersEngine  # noqa: PLC0415 - heavy

    table = recorded["table"]
    table["checkpoint"] = [str(recorded["folder"] / json.loads(m)["checkpoint"]) for m in table["meta"]]
    initial = TransformersEngine(DEMO_POLICY, device="cpu")
    worst = {"logprobs": 0.0, "entropies": 0.0, "ref_logprobs": 0.0}
    for checkpoint, rows in table.groupby("checkpoint"):
        prompts, responses = list(rows["prompt_ids"]), list(rows["token_ids"])
        scored = TransformersEngine(checkpoint, device="cpu").score(prompts, responses)
        reference = initial.score(prompts, responses)
        for s, r, (_, row) in zip(scored, reference, rows.iterrows(), strict=True):
            worst["logprobs"] = max(worst["logprobs"], np.abs(s.logprobs - row["logprobs"]).max())
            worst["entropies"] = max(worst["entropies"], np.abs(s.entropies - row["entropies"]).max())
            worst["ref_logprobs"] = max(worst["ref_logprobs"], np.abs(r.logprobs - row["ref_logprobs"]).max())
    assert table["checkpoint"].nunique() == STEPS
    assert max(worst.values()) < 1e-4, worst
    # the policy moved: its logprobs at step 3 are not the reference's
    last = table[table["step"] == STEPS]
    moved = [np.abs(a - b).max() for a, b in zip(last["logprobs"], last["ref_logprobs"], strict=True)]
    assert max(moved) > 1e-3


def test_logprobs_after_equal_a_rescoring_with_the_checkpoint_after_each_update(recorded, tmp_path):
    """The recorder's logprobs_after (route 1) and `creditlens landed --source checkpoints` (route 2, the
    checkpoint the trainer saved after the step's update) give the same realized Δ on the same run."""
    table, recorder = recorded["table"], recorded["recorder"]
    meta = [json.loads(m) for m in table["meta"]]
    assert [m["after_policy_step"] for m in meta] == table["step"].tolist()  # one optimizer step per batch
    assert {m["checkpoint_after"] for m in meta} == {
        os.path.relpath(
            (recorded["base"] / "trainer" / f"checkpoint-{s}").resolve(), recorded["folder"].resolve()
        )
        for s in range(1, STEPS + 1)
    }
    assert 0 < recorder.after_seconds < recorder.seconds
    for before, after in zip(table["logprobs"], table["logprobs_after"], strict=True):
        assert len(before) == len(after)
    db = tmp_path / "landed.duckdb"
    done = run_cli_here("import", recorded["folder"], "--db", db, "--run", "r", "--quiet")
    assert (
        done.returncode == 0 and "after-update checkpoints named by the step files: 3 attached" in done.stdout
    )
    routes = {}
    for source in ("recorded", "checkpoints"):
        done = run_cli_here("landed", "--db", db, "--run", "r", "--source", source, "--json")
        assert done.returncode == 0, done.stderr
        routes[source] = json.loads(done.stdout)
    assert routes["checkpoints"]["source"] == "checkpoints"
    for a, b in zip(routes["recorded"]["steps"], routes["checkpoints"]["steps"], strict=True):
        assert a["tokens"] == b["tokens"]
        assert a["mean_delta"] == pytest.approx(b["mean_delta"], abs=1e-5)
        assert (a["spearman"] is None) == (b["spearman"] is None)
        assert a["spearman"] is None or a["spearman"] == pytest.approx(b["spearman"], abs=1e-4)
    import creditlens  # noqa: PLC0415 - the notebook API, as a user imports it

    run = creditlens.open(db).run("r")
    one, two = run.landed("tokens", source="recorded"), run.landed("tokens", source="checkpoints")
    assert np.abs(one["delta"].to_numpy()).max() > 1e-3  # the update moved the policy
    np.testing.assert_allclose(one["logprob_after"], two["logprob_after"], atol=1e-4)


def test_importing_the_folder_adds_what_the_follower_added(recorded, tmp_path):
    db = tmp_path / "again.duckdb"
    done = run_cli_here("import", recorded["folder"], "--db", db, "--run", "whole", "--quiet")
    assert done.returncode == 0, done.stderr
    assert f"imported {len(recorded['table'])} rollouts" in done.stdout and "native format" in done.stdout
    again = run_cli_here("import", recorded["folder"], "--db", db, "--run", "whole", "--quiet")
    assert again.returncode == 0 and "nothing added" in again.stdout
    one = run_cli_here(
        "import", recorded["folder"] / "step_000002.parquet", "--db", db, "--run", "whole", "--quiet"
    )
    assert one.returncode == 0 and "nothing added" in one.stdout, one.stdout + one.stderr


def test_bad_input_is_refused_clearly(recorded, tmp_path):
    from creditlens.integrations import trl as lens_trl  # noqa: PLC0415 - imports TRL

    trainer = recorded["trainer"]
    with pytest.raises(TypeError, match="takes a trl.GRPOTrainer, got str"):
        lens_trl.record("trainer", tmp_path / "x")
    with pytest.raises(ValueError, match="already recorded"):
        lens_trl.record(trainer, tmp_path / "x")
    recorded["recorder"].close()
    try:
        with pytest.raises(ValueError, match="already holds step files"):
            lens_trl.record(trainer, recorded["folder"])
        with pytest.raises(ValueError, match="the trainer's output_dir"):
            lens_trl.record(trainer, trainer.args.output_dir)
        (tmp_path / "file").write_text("")
        with pytest.raises(ValueError, match="not a folder"):
            lens_trl.record(trainer, tmp_path / "file")
        with pytest.raises(TypeError, match="True or False"):
            lens_trl.record(trainer, tmp_path / "y", entropies="yes")
    finally:
        assert "_generate_and_score_completions" not in trainer.__dict__
    ids = [np.array([1, 2, 3])]
    records = StepRecords(
        step=1,
        prompts=["p"],
        responses=["r"],
        prompt_ids=ids,
        token_ids=ids,
        rewards={"task": np.array([1.0])},
        groups=np.array([0]),
        per_token={"logprobs": [np.array([0.0, -1.0])]},
    )
    with pytest.raises(ValueError, match=r"logprobs\[0\] has 2 entries, token_ids\[0\] has 3"):
        records.table("here")
    records.per_token = {"logprobs": [np.array([0.0, np.nan, -1.0])]}
    with pytest.raises(ValueError, match=r"here: logprobs\[0\] has a NaN"):
        records.table("here")
