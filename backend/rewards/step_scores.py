"""Run a step verifier over a stored run and store its verdicts as the process channel
(`creditlens verify-steps`).

Each rollout's lines are judged on its token text (its response when the run has none) with its
prompt and its group's ground truth; the per-step scores become `token_rewards[channel]` at the step
ends and their sum `scores[channel]` (`backend.rewards.evaluate.process_channel`). All rollouts are
judged before anything is written, then the channel is replaced in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from backend.core.errors import InputError
from backend.rewards.evaluate import process_channel
from backend.rewards.registry import get_step_verifier
from backend.rewards.steps import first_wrong
from backend.store.channel_queries import replace_channel, step_inputs


@dataclass
class StepReport:
    """rollouts judged, steps and wrong steps over them, rollouts with a wrong step; per rollout (by id):
    its first wrong step's index and note (only rollouts with one)."""

    run: str
    channel: str
    step_verifier: str
    rollouts: int
    steps: int
    wrong_steps: int
    with_wrong_step: int
    first_wrong: dict[int, tuple[int, str]] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "run": self.run,
            "channel": self.channel,
            "step_verifier": self.step_verifier,
            "rollouts": self.rollouts,
            "steps": self.steps,
            "wrong_steps": self.wrong_steps,
            "with_wrong_step": self.with_wrong_step,
            "first_wrong": [
                {"rollout_id": r, "step": k, "note": note}
                for r, (k, note) in sorted(self.first_wrong.items())
            ],
        }


def verify_steps(
    handle, run: str, step_verifier: str = "arithmetic_steps", channel: str = "process"
) -> StepReport:
    """Judge every rollout of `run` with `step_verifier` and store the result as channel `channel`."""
    get_step_verifier(step_verifier)  # an unknown name fails before any work
    if channel in ("task", "kl"):
        raise InputError(f"--channel {channel!r}: that channel is not a process channel; use e.g. process")
    with handle.read() as store:
        rows = step_inputs(store, run)
    scores: dict[int, float] = {}
    local: dict[int, list[float]] = {}
    report = StepReport(run, channel, step_verifier, 0, 0, 0, 0)
    for row in rows.itertuples():
        rid = int(row.rollout_id)
        # DuckDB hands a NULL list to pandas as pd.NA (not None): test for a real sequence.
        tokens = list(row.tokens) if isinstance(row.tokens, (list, np.ndarray)) else None
        truth = row.ground_truth if isinstance(row.ground_truth, str) else None
        try:
            score, rewards, steps = process_channel(
                row.prompt if isinstance(row.prompt, str) else None,
                row.response if isinstance(row.response, str) else "",
                truth,
                tokens,
                step_verifier,
            )
        except InputError as exc:
            raise InputError(f"run {run!r}, rollout {rid}: {exc}") from None
        scores[rid] = score
        if rewards is not None:
            local[rid] = rewards
        report.rollouts += 1
        report.steps += len(steps)
        wrong = [s for s in steps if s.score < 0]
        report.wrong_steps += len(wrong)
        k = first_wrong(steps)
        if k is not None:
            report.with_wrong_step += 1
            report.first_wrong[rid] = (k, steps[k].note)
    with handle.write() as store:
        replace_channel(store, run, channel, scores, local)
    return report
