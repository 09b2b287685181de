"""Turns of an agent's response: token spans by role, the loss mask they imply and the spans a mask implies.

A multi-turn response interleaves the policy's turns with what others wrote (a tool's output, an
environment's observation, a user's message). `turns` lists them as (role, start, end) token spans, end
exclusive; `loss_mask` is 1 on the tokens the trainer trains. No torch here: the importers and the store
use it too.
"""

from __future__ import annotations

ROLES = ("assistant", "tool", "user", "environment", "system")
"""The roles a turn may have; only `assistant` turns are written (and trained) by the policy."""
POLICY_ROLE = "assistant"


def spans_from_mask(loss_mask: list[int] | list[bool], untrained_role: str = "environment") -> list[dict]:
    """The turns a loss mask implies when a log has no others: its contiguous runs, trained ones as
    `assistant` turns, untrained ones as `untrained_role` (what wrote them, when the format says)."""
    turns: list[dict] = []
    for t, m in enumerate(loss_mask):
        role = POLICY_ROLE if m else untrained_role
        if turns and turns[-1]["role"] == role:
            turns[-1]["end"] = t + 1
        else:
            turns.append({"role": role, "start": t, "end": t + 1})
    return turns


def mask_from_turns(turns: list[dict], n: int) -> list[int]:
    """The loss mask turns imply when a log has none: 0 on the tokens of turns not written by the policy,
    1 elsewhere (assistant turns and tokens outside any turn)."""
    mask = [1] * n
    for turn in turns:
        if turn["role"] != POLICY_ROLE:
            mask[turn["start"] : turn["end"]] = [0] * (turn["end"] - turn["start"])
    return mask


def assistant_turns(turns: list[dict]) -> list[dict]:
    """The policy's turns, in order (what `turn_rewards` are one per)."""
    return [t for t in turns if t["role"] == POLICY_ROLE]
