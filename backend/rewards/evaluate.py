"""All channels of one response: task (the run's verifier), format, style, length, process (a step
verifier, when given), and token rewards."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from backend.rewards import rules, steps
from backend.rewards.registry import get_step_verifier, get_verifier, run_step_verifier, run_verifier


@dataclass
class Evaluation:
    """scores: channel -> sequence score; token_rewards: channel -> (L,) token-local reward;
    spans: (first_token, end_token, rule, channel) of every violation."""

    scores: dict[str, float]
    token_rewards: dict[str, list[float]]
    spans: list[dict] = field(default_factory=list)


def merged_count(spans: Sequence[rules.Span]) -> int:
    """Number of violations after merging overlapping or touching spans (one phrase counts once)."""
    count, end = 0, -1
    for span in sorted(spans, key=lambda s: s.start):
        if span.start > end:
            count += 1
        end = max(end, span.end)
    return count


def evaluate(
    response: str,
    ground_truth,
    tokens: Sequence[str] | None = None,
    verifier: str = "answer_match",
    length_budget: int = 64,
    prompt: str | None = None,
    step_verifier: str | None = None,
) -> Evaluation:
    """Score a response on every channel; `tokens` (display text per token) enables token rewards;
    `step_verifier` (a name, with the `prompt`) adds the process channel (`process_channel`).

    If `"".join(tokens)` differs from `response`, token offsets are still taken from `tokens`
    (spans are then found in the joined token text, which is what the token rewards must align with).
    """
    text = "".join(tokens) if tokens is not None else response
    task = run_verifier(get_verifier(verifier), response, ground_truth, verifier)
    format_spans = rules.format_spans(text)
    style_spans = rules.style_spans(text)
    n_tokens = len(tokens) if tokens is not None else len(response)
    scores = {
        "task": task,
        "format": -1.0 if format_spans else 0.0,
        "style": float(-merged_count(style_spans)),
        "length": rules.length_score(n_tokens, length_budget),
    }
    token_rewards: dict[str, list[float]] = {}
    spans: list[dict] = []
    if tokens is not None:
        offsets = rules.token_offsets(tokens)
        all_spans = format_spans + style_spans
        token_rewards = {
            "format": rules.token_penalties(all_spans, offsets, "format"),
            "style": rules.token_penalties(all_spans, offsets, "style"),
        }
        spans = [
            {"start": a, "end": b, "channel": s.channel, "rule": s.rule}
            for a, b, s in rules.token_spans(all_spans, offsets)
        ]
    if step_verifier is not None:
        score, local, _ = process_channel(prompt, response, ground_truth, tokens, step_verifier)
        scores["process"] = score
        if local is not None:
            token_rewards["process"] = local
    return Evaluation(scores, token_rewards, spans)


def process_channel(
    prompt: str | None, response: str, ground_truth, tokens: Sequence[str] | None, step_verifier: str
) -> tuple[float, list[float] | None, list[steps.Step]]:
    """(sequence score, token rewards or None without tokens, steps) of the process channel.

    The steps are judged on `"".join(tokens)` when tokens are given (what the token rewards align
    with). The sequence score is the sum of the step scores, so it equals the sum of the token rewards
    (-1 per wrong step with `arithmetic_steps`).
    """
    text = "".join(tokens) if tokens is not None else response
    found = run_step_verifier(get_step_verifier(step_verifier), prompt, text, ground_truth, step_verifier)
    score = float(sum(s.score for s in found))
    local = steps.step_token_rewards(found, tokens) if tokens is not None else None
    return score, local, found
