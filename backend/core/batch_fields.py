"""The names a batch is made of, without tensors: per-token fields, extras, channels and their messages.

Kept apart from `backend.core.batch` (which imports torch) so that the store and the commands that only read
it (`creditlens runs`, `rollouts`, ...) never import torch; `backend.core.batch` re-exports every name.
"""

from __future__ import annotations

PER_TOKEN_FIELDS = ("logprobs", "ref_logprobs", "entropies", "values")
"""The per-token float fields of a response (the store's columns, the native format's lists)."""
AGENT_COLUMNS = ("turns", "turn_rewards")
"""An agent's turns and the environment's score after each assistant turn: optional batch fields that
turn-level estimators need (the loss mask, what is trained, always comes)."""
OPTIONAL_FIELDS = (*PER_TOKEN_FIELDS, "tokens", *AGENT_COLUMNS)
"""Fields of a batch that a run may lack (None then); extras are optional by name."""
MC_EXTRAS = ("mc_values", "mc_mask")
"""The extras the store builds from resampling results: V̂(s_t) per position and where it is known."""
MODEL_SCORED = ("oar_p", "oar_g", "gcpo")
"""Estimators whose per-token scores come from running the policy (`creditlens model-credit --method NAME`),
cached in the store (table model_credit) and carried as the extras `model_score_needs(NAME)`."""


def model_score_needs(name: str) -> tuple[str, str]:
    """The batch extras holding estimator `name`'s cached model scores: (scores, mask of scored tokens)."""
    return f"{name}_scores", f"{name}_mask"


MODEL_SCORE_EXTRAS = {extra: name for name in MODEL_SCORED for extra in model_score_needs(name)}
"""Extra name -> the model-scored estimator it belongs to."""


MODEL_FILLED = ("logprobs", "entropies")
"""The per-token fields `creditlens score` computes with the policy model (what a missing field's message
may send the user to; a trainer's logged advantage or a reference model's logprobs it cannot make)."""


class BatchError(ValueError):
    """Bad numbers in a batch (NaN/inf, wrong shape); the message names the field and the rollout."""


ALL_CHANNELS = "all"
"""The summed reward's channel name: per rollout the sum of the channel scores (`with_channel_sum`)."""


def default_main_channel(channels: list[str]) -> str:
    """A run's main channel when nobody chose one: `task` when the run has it, its one channel when it has
    one, else the sum `all` (TRL's combined reward of several reward functions)."""
    if "task" in channels or not channels:
        return "task"
    return channels[0] if len(channels) == 1 else ALL_CHANNELS


def missing_channel(channel: str, channels: list[str], all_as: str | None = None) -> str:
    """The message for a channel a run lacks: the run's channels and the hint of the summed channel
    (`all_as`: how the caller's user asks for it; default: the command line's and the app's words)."""
    have = ", ".join(sorted(channels)) or "none"
    all_as = all_as or f"--channel {ALL_CHANNELS} (in the app: the channel '{ALL_CHANNELS}')"
    hint = f"; {all_as} sums them per rollout" if channels and ALL_CHANNELS not in channels else ""
    return f"this run has no scores for channel {channel!r}; its channels: {have}{hint}"
