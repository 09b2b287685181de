"""What each column of the run explorer means: the one list the Explorer's column headers (their hover
help) and docs/app-and-sharing.md ("The Explorer's columns"; tests/app/test_column_help.py checks both) are
written from. `A` is the credit the share columns describe: A_final by default, or the estimator's output
on its channel (`creditlens rollouts --credit channel`).
"""

from __future__ import annotations

EXACT: dict[str, str] = {
    "rollout_id": "The rollout's id in the store; click a row to open it in the Rollout view.",
    "preview": "The start of the response.",
    "step": "The training step that sampled the rollout.",
    "group_id": "The group: the responses to one prompt at one step, normalized together.",
    "length": "Response tokens.",
    "turns": "An agent run's turns in the response (assistant, tool, environment).",
    "assistant_turns": "The policy's own turns.",
    "tool_calls": "The tool or environment turns (their tokens are not trained: they get no credit).",
    "reward": "The sum of the rollout's channel scores.",
    "zero_variance": "Every rollout of the group has the same score on the main channel: "
    "a group-relative estimator gives it no credit.",
    "truncated": "The response hit the length limit (meta.truncated or finish_reason = length); "
    "empty when the log does not say.",
    "repetition": "Share of the response's 16-token windows that repeat an earlier one "
    "(empty under 16 tokens).",
    "mean_entropy": "Mean per-token entropy of the policy over the response.",
    "kl": "Mean of logprob − ref logprob over the response (the sampled estimate of KL to the reference).",
    "turn_share_first": "The first assistant turn's share of the rollout's Σ|A|.",
    "turn_share_last": "The last assistant turn's share of the rollout's Σ|A|.",
    "turn_share_calls": "The share of Σ|A| of the assistant turns a tool answered.",
    "max_abs": "The rollout's largest |A|.",
    "logged_gap": "Mean recomputed A − the trainer's logged advantage (runs that log an advantage).",
    "spearman": "Rank correlation of the two estimators' A over the rollout's tokens; empty when one gives "
    "every token the same A (grpo always does).",
    "landed_spearman": "Did the credit land: Spearman ρ between the credit and the realized Δ log π "
    "(after the update that consumed the step) over the rollout's trained tokens; empty when the credit is "
    "the same on every token (grpo's is).",
    "landed_sign": "Share of the rollout's tokens with non-zero credit whose log π moved the credit's way "
    "(rose under positive credit, fell under negative).",
    "landed_mean_delta": "Mean realized Δ log π = log π_after − log π_before over the rollout's trained "
    "tokens.",
}
"""Columns by their exact name."""

PREFIXED: dict[str, str] = {
    "excess_pos_": "The part of excess_<class> from the positive credit.",
    "excess_neg_": "The part of excess_<class> from the negative credit.",
    "excess_": "The class's share of Σ|A| minus its share of the tokens: > 0, more credit than its text. "
    "Over the classes of a rollout it sums to 0.",
    "pos_share_": "The class's share of the rollout's positive credit.",
    "neg_share_": "The class's share of the rollout's negative credit.",
    "share_": "The class's share of the rollout's Σ|A|; empty when the rollout got no credit (Σ|A| = 0). "
    "The key class is a marker only some runs carry (the synthetic oracle's).",
    "score_": "The channel's sequence score.",
    "metric_": "A number the trainer logged for the rollout (e.g. verl's acc), not a reward.",
}
"""Columns by their prefix (`<prefix><class>`, `<prefix><channel>`), longest prefix first."""


def column_help(column: str) -> str | None:
    """The definition of `column`, or None for a column this list does not know."""
    if column in EXACT:
        return EXACT[column]
    return next((text for prefix, text in PREFIXED.items() if column.startswith(prefix)), None)


def markdown_table() -> str:
    """The columns as the markdown table docs/app-and-sharing.md carries."""
    rows = [f"| `{name}` | {text} |" for name, text in EXACT.items()]
    rows += [f"| `{prefix}<name>` | {text} |" for prefix, text in PREFIXED.items()]
    return "\n".join(["| column | what it is |", "|---|---|", *rows])
