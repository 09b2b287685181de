"""Local rules: the answer-line format, style spans and length pressure.

Rules find character spans in the response text; `token_spans` maps them onto tokens through each
token's character offsets, so a rule written against text becomes a token-local reward.

Channel conventions (higher is better everywhere; a rule channel is 0.0 when clean and negative when
violated, which is what the store's violation rates count):
- format: 0.0 when the response ends with exactly one answer line `#### <integer>`, else -1.0;
- style: minus the number of style spans (0.0 is clean);
- length: 0.0 up to the budget, then minus the overshoot as a fraction of the budget.
Token rewards put -1.0 on every token that a format or style span touches, 0.0 elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

ANSWER_LINE = re.compile(r"####[ ]\-?\d+")
EXCITED = re.compile(
    r"\b(?:obviously|clearly|trivially|easy|wow|amazing|of course)\b[ \t]*!+|!{2,}", re.IGNORECASE
)
FILLER_PHRASES = ("basically", "let me think", "you know", "um", "uh", "so yeah", "well well", "i mean")
FILLER = re.compile(r"\b(?:" + "|".join(re.escape(p) for p in FILLER_PHRASES) + r")\b,?", re.IGNORECASE)
# A word n-gram (1-3 words) repeated right after itself; the span covers the repeats, not the first copy.
REPEATED_NGRAM = re.compile(r"\b([A-Za-z]+(?:[ \t]+[A-Za-z]+){0,2})((?:[ \t,]+\1\b)+)", re.IGNORECASE)


@dataclass(frozen=True)
class Span:
    """Characters [start, end) of the response that broke `rule` (channel `channel`)."""

    start: int
    end: int
    channel: str
    rule: str


def format_spans(response: str) -> list[Span]:
    """Where the answer-line format is broken; an empty list means the format holds.

    The rule: the last non-empty line is exactly `#### <integer>` and no earlier line is an answer line.
    A missing answer line marks the last line; extra answer lines are marked each.
    """
    lines, offset, spans = [], 0, []
    for line in response.split("\n"):
        lines.append((offset, line))
        offset += len(line) + 1
    content = [(o, line) for o, line in lines if line.strip()]
    if not content:
        return [Span(0, len(response), "format", "empty response")] if response else []
    last_offset, last = content[-1]
    if not ANSWER_LINE.fullmatch(last):
        rule = "answer line malformed" if "####" in last else "no final answer line `#### n`"
        spans.append(Span(last_offset, last_offset + len(last), "format", rule))
    for o, line in content[:-1]:
        if "####" in line:
            spans.append(Span(o, o + len(line), "format", "answer line before the end"))
    return spans


def style_spans(response: str) -> list[Span]:
    """Over-excitement, filler phrases and repeated word n-grams, in text order."""
    spans = [Span(m.start(), m.end(), "style", "over-excited") for m in EXCITED.finditer(response)]
    spans += [Span(m.start(), m.end(), "style", "filler") for m in FILLER.finditer(response)]
    for m in REPEATED_NGRAM.finditer(response):
        spans.append(Span(m.start(2), m.end(2), "style", "repeated n-gram"))
    spans += repeated_line_spans(response)
    return sorted(spans, key=lambda s: (s.start, s.end))


def repeated_line_spans(response: str) -> list[Span]:
    """A non-empty line identical to the line before it."""
    spans, offset, previous = [], 0, None
    for line in response.split("\n"):
        if line.strip() and line == previous:
            spans.append(Span(offset, offset + len(line), "style", "repeated line"))
        previous = line
        offset += len(line) + 1
    return spans


def length_score(n_tokens: int, budget: int = 64) -> float:
    """0.0 within `budget` tokens, then -(n_tokens - budget) / budget."""
    return -max(0, n_tokens - budget) / budget


def token_offsets(tokens: Sequence[str]) -> list[tuple[int, int]]:
    """(start, end) character offsets of each token, assuming the response is `"".join(tokens)`."""
    offsets, position = [], 0
    for tok in tokens:
        offsets.append((position, position + len(tok)))
        position += len(tok)
    return offsets


def token_spans(spans: Sequence[Span], offsets: Sequence[tuple[int, int]]) -> list[tuple[int, int, Span]]:
    """Map character spans to token index ranges [first, last + 1) of the tokens they overlap."""
    mapped = []
    for span in spans:
        hit = [k for k, (a, b) in enumerate(offsets) if a < span.end and span.start < b]
        if not hit and span.start == span.end == 0 and offsets:
            hit = [0]
        if hit:
            mapped.append((hit[0], hit[-1] + 1, span))
    return mapped


def token_penalties(spans: Sequence[Span], offsets: Sequence[tuple[int, int]], channel: str) -> list[float]:
    """-1.0 on every token a span of `channel` overlaps, 0.0 elsewhere."""
    reward = [0.0] * len(offsets)
    for first, last, _span in token_spans([s for s in spans if s.channel == channel], offsets):
        for k in range(first, last):
            reward[k] = -1.0
    return reward
