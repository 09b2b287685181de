"""A real TRL completion log with a 0/1 `format_ok` reward that fails 7 of 8 completions at the first step
(issue 43 item 3), written by TRL's own `GRPOTrainer(log_completions=True)` on CPU with the bundled demo
policy, beside a continuous `digits_reward` in [0, 1]: the two-reward run the Tune view and `creditlens
tune` are checked on.

`format_ok` decides by position, not by text (the demo policy's completions are random), so the failures
are known: at global step k (0-based) the first k + 1 completions of the group pass, the rest fail.
"""

from __future__ import annotations

from pathlib import Path

from tests.backend.ingest.trl_logs import DEMO_POLICY

NUM_GENERATIONS = 8


def format_ok(completions, trainer_state=None, **kwargs):
    """1.0 for the first `global_step + 1` completions of each group, 0.0 for the rest."""
    step = int(getattr(trainer_state, "global_step", 0) or 0)
    return [1.0 if i % NUM_GENERATIONS <= step else 0.0 for i in range(len(completions))]


def digits_reward(completions, **kwargs):
    """0.25 per digit of the completion, capped at 1."""
    return [min(1.0, 0.25 * sum(ch.isdigit() for ch in str(c))) for c in completions]


def run_format_grpo(output_dir: Path, steps: int = 3) -> Path:
    """Train `steps` GRPO steps (one group of 8 per step) and return TRL's completion log directory."""
    from datasets import Dataset  # noqa: PLC0415 - heavy, only for the fixture that trains
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415 - heavy, idem
    from trl import GRPOConfig, GRPOTrainer  # noqa: PLC0415 - heavy, idem

    tokenizer = AutoTokenizer.from_pretrained(DEMO_POLICY, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(DEMO_POLICY, local_files_only=True)
    rows = [{"prompt": p} for p in ["12+34=?\n", "5+7=?\n", "40+2=?\n", "9+9=?\n"]]
    config = GRPOConfig(
        output_dir=str(output_dir),
        max_steps=steps,
        per_device_train_batch_size=NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS,
        max_completion_length=16,
        learning_rate=1e-4,
        logging_steps=1,
        log_completions=True,
        num_completions_to_print=0,
        shuffle_dataset=False,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
        temperature=1.0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[digits_reward, format_ok],
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    trainer.train()
    return output_dir / "completions"
