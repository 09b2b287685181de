"""A real TRL completion log with a 0/1 `format_ok` reward that fails 7 of 8 completions at the first step
(issue 43 item 3), written by TRL's own `GRPOTrainer(log_completions=True)` on CPU with the bundled demo
policy, beside a continuous `digits_reward` in [0, 1]: the two-reward run the Tune view and `creditlens
tune` are checked on.

`format_ok` decides by position, not by text (the demo policy's completions are random), so the failures
are known: at global step k (0-based) the first k + 1 completions of the group pass, the rest fail.
"""

from __future__ import annotations

from pathlib import Path

from tests.backend.ingest.trl_logs import train_logged

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
    rows = [{"prompt": p} for p in ["12+34=?\n", "5+7=?\n", "40+2=?\n", "9+9=?\n"]]
    return train_logged(
        output_dir,
        rows,
        [digits_reward, format_ok],
        steps=steps,
        num_generations=NUM_GENERATIONS,
        batch_size=NUM_GENERATIONS,
    )
