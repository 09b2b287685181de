"""Token classes: the user's names for kinds of tokens, for "where does the credit land" questions.

A class is a regex matched against each token's text, a list of phrases (a token belongs to the class
when it overlaps an occurrence of a phrase in the response, so multi-token phrases such as "let me
think" work with any tokenizer), or one of the run's own markers (`key`: the synthetic run's key
tokens; `style span`: the style mask or non-zero style/format token rewards). Classes are tried in
order; the first that matches wins; tokens no class matches are `other`. A run's classes are saved
with the run in the store (`Store.set_run_meta`, key "token_classes"); runs without their own use
`DEFAULT_CLASSES`, whose `filler` class (FILLER_PHRASES: padding and sycophancy) comes before `style span`,
so filler is found by its words on any run, whether or not a style rule marked it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from backend.core.errors import InputError

if TYPE_CHECKING:  # batches are only passed in: the class definitions and their editing need no torch
    from backend.core.batch import RolloutBatch

OTHER = "other"
MARKERS = ("key", "style span")
# The channels whose token rewards mark a `style span`: style only. A format penalty sits on the answer
# line (or the last line when it is missing): marking it too made a rollout without any filler top a sort
# by style-span share.
_STYLE_CHANNELS = ("style",)


@dataclass(frozen=True)
class TokenClass:
    """name: the label; kind: regex (searched in the token text), phrases (one per line, matched
    case-insensitively in the response text), or marker (one of MARKERS); pattern: the regex, the
    phrases, or the marker's name."""

    name: str
    kind: Literal["regex", "phrases", "marker"]
    pattern: str

    def __post_init__(self) -> None:
        if not self.name.strip() or self.name == OTHER:
            raise InputError(f"token class name {self.name!r}: give a non-empty name other than {OTHER!r}")
        if self.kind == "regex":
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise InputError(
                    f"token class {self.name!r}: {self.pattern!r} is not a regex ({exc})"
                ) from None
        elif self.kind == "phrases":
            if not self.phrases:
                raise InputError(f"token class {self.name!r}: give at least one phrase (one per line)")
        elif self.kind == "marker":
            if self.pattern not in MARKERS:
                raise InputError(f"token class {self.name!r}: marker must be one of {MARKERS}")
        else:
            raise InputError(
                f"token class {self.name!r}: kind must be regex, phrases or marker, got {self.kind!r}"
            )

    @property
    def phrases(self) -> list[str]:
        return [p.strip().lower() for p in self.pattern.splitlines() if p.strip()]


# Phrases common in padded or sycophantic answers (matched case-insensitively in the response text, so a
# phrase split over tokens is found); whole phrases, not single short words that occur inside other words.
FILLER_PHRASES = (
    "great question",
    "good question",
    "excellent question",
    "what a great",
    "i'm glad you asked",
    "i hope this helps",
    "hope this helps",
    "let me know if",
    "feel free to",
    "happy to help",
    "i'd be happy to",
    "i would be happy to",
    "certainly!",
    "absolutely!",
    "of course!",
    "sure thing",
    "as an ai",
    "it's important to note",
    "it is important to note",
    "it's worth noting",
    "it is worth noting",
    "needless to say",
    "to be honest",
    "basically",
    "essentially",
    "obviously",
    "clearly",
    "simply put",
    "let me think",
    "you know",
    "i mean",
    "so yeah",
    "well well",
    "in conclusion",
    "to summarize",
    "in summary",
)

DEFAULT_CLASSES: tuple[TokenClass, ...] = (
    TokenClass("key", "marker", "key"),
    TokenClass("filler", "phrases", "\n".join(FILLER_PHRASES)),
    TokenClass("style span", "marker", "style span"),
    TokenClass("step end", "regex", r"\n"),
    TokenClass("digits", "regex", r"^\s*\d+\s*$"),
    TokenClass("punctuation", "regex", r"^\s*[^\w\s]+\s*$"),
    TokenClass("whitespace", "regex", r"^\s+$"),
)


def move(classes: tuple[TokenClass, ...], name: str, where: str) -> tuple[TokenClass, ...]:
    """`classes` with class `name` moved `up`, `down` (one place), `first` or `last` (the order is the
    priority: the first class that matches a token wins). InputError names an unknown class or direction."""
    order = [c.name for c in classes]
    if name not in order:
        raise InputError(f"token class {name!r}: no such class; classes: {', '.join(order)}")
    i = order.index(name)
    targets = {"up": max(i - 1, 0), "down": min(i + 1, len(order) - 1), "first": 0, "last": len(order) - 1}
    if where not in targets:
        raise InputError(f"move {name!r} {where!r}: use one of {', '.join(targets)}")
    rest = [c for c in classes if c.name != name]
    rest.insert(targets[where], classes[i])
    return tuple(rest)


def shown_pattern(c: TokenClass) -> str:
    """A class's pattern as people edit it on one line: phrases joined by " | " (the separator the editor
    and `creditlens token-classes --add` read back), a regex or marker as written."""
    return " | ".join(c.phrases) if c.kind == "phrases" else c.pattern


def parse_pattern(kind: str, text: str) -> str:
    """The stored pattern of an edited one-line pattern: phrases separated by "|" (or lines) become one per
    line; a regex or marker is kept as written."""
    if kind != "phrases":
        return str(text)
    return "\n".join(p.strip() for line in str(text).splitlines() for p in line.split("|") if p.strip())


def names(classes: tuple[TokenClass, ...] = DEFAULT_CLASSES) -> tuple[str, ...]:
    """Class labels in priority order, `other` last: the index space of `class_ids`."""
    return (*[c.name for c in classes], OTHER)


def to_json(classes: tuple[TokenClass, ...]) -> list[dict]:
    return [asdict(c) for c in classes]


def from_json(items: list[dict] | None) -> tuple[TokenClass, ...]:
    """Classes from their saved form; None or an empty list gives the defaults."""
    if not items:
        return DEFAULT_CLASSES
    try:
        classes = tuple(TokenClass(str(i["name"]), i["kind"], str(i["pattern"])) for i in items)
    except (KeyError, TypeError) as exc:
        raise InputError(f"token classes: each needs name, kind and pattern ({exc})") from None
    seen = [c.name for c in classes]
    if len(set(seen)) != len(seen):
        raise InputError(f"token classes: names must be unique, got {seen}")
    return classes


DEFAULT_LINK = "default"


def to_link(classes: tuple[TokenClass, ...]) -> str:
    """Classes as one URL parameter value: compact JSON `[[name, kind, pattern], ...]`, or "default"."""
    if tuple(classes) == DEFAULT_CLASSES:
        return DEFAULT_LINK
    triples = [[c.name, c.kind, c.pattern] for c in classes]
    return json.dumps(triples, separators=(",", ":"), ensure_ascii=False)


def from_link(text: str) -> tuple[TokenClass, ...]:
    """The classes of `to_link`'s text; `InputError` naming the class that cannot be used and why."""
    if text.strip() == DEFAULT_LINK:
        return DEFAULT_CLASSES
    try:
        items = json.loads(text)
    except ValueError:
        raise InputError('not a list of [name, kind, pattern] triples (JSON) or "default"') from None
    if not isinstance(items, list) or not items:
        raise InputError('not a list of [name, kind, pattern] triples (JSON) or "default"')
    for i, item in enumerate(items):
        if not (isinstance(item, list) and len(item) == 3 and all(isinstance(x, str) for x in item)):
            raise InputError(f"class {i + 1} is not a [name, kind, pattern] triple of strings")
    return from_json([{"name": n, "kind": k, "pattern": p} for n, k, p in items])


def save(store, run: str, classes: tuple[TokenClass, ...] | None) -> None:
    """Keep `classes` with run `run` in `store` (a `Store` open for writing); None restores the defaults.
    The run's credit summaries by class are dropped (the Explorer recomputes them)."""
    store.set_run_meta(run, "token_classes", None if classes is None else to_json(classes))
    store.drop_credit_summaries(run)


CLASS_FIELDS = ("token_text", "token_rewards", "style_mask", "key_mask")
"""The batch fields token classes read (text, style channels' token rewards, synthetic runs' masks): a
streamed estimate that saves credit summaries loads them (`backend.credit.estimates.stream_run`)."""


def _markers(batch: RolloutBatch) -> dict[str, np.ndarray]:
    B, T = batch.response_mask.shape
    style = np.zeros((B, T), dtype=bool)
    if "style_mask" in batch.extras and batch.extras["style_mask"].dim() == 2:
        style |= batch.extras["style_mask"].cpu().numpy() > 0
    for channel in _STYLE_CHANNELS:
        if channel in batch.token_rewards:
            style |= batch.token_rewards[channel].cpu().numpy() != 0
    key = np.zeros((B, T), dtype=bool)
    if "key_mask" in batch.extras and batch.extras["key_mask"].dim() == 2:
        key = batch.extras["key_mask"].cpu().numpy() > 0
    return {"key": key, "style span": style}


def _flat_text(batch: RolloutBatch, lengths: np.ndarray) -> pa.Array | None:
    """The text of every real token, flat in row-major order (null where a response's token list is
    shorter than its response; longer lists are cut at the response's length), or None without text."""
    n = int(lengths.sum())
    if batch.token_text is not None and len(batch.token_text) == n:
        return batch.token_text
    if batch.tokens is None:
        return None
    flat: list[str | None] = []
    for row, length in zip(batch.tokens, lengths.tolist(), strict=True):
        flat.extend(row[:length])
        flat.extend([None] * (length - len(row[:length])))
    return pa.array(flat, pa.string())


def flat_class_ids(batch: RolloutBatch, classes: tuple[TokenClass, ...] = DEFAULT_CLASSES) -> np.ndarray:
    """(N,) int64 index into `names(classes)` of every real token, in row-major order of the mask.

    Regexes run once per distinct token text (a run has far fewer distinct tokens than tokens); phrases
    once per response, on its joined text."""
    mask = batch.response_mask.cpu().numpy().astype(bool)
    lengths = mask.sum(axis=1)
    out = np.full(int(lengths.sum()), len(classes), dtype=np.int64)
    text = _flat_text(batch, lengths) if any(c.kind != "marker" for c in classes) else None
    markers = _markers(batch) if any(c.kind == "marker" for c in classes) else {}
    codes = distinct = None
    if text is not None and any(c.kind == "regex" for c in classes):
        encoded = pc.dictionary_encode(text)
        distinct = encoded.dictionary.to_pylist()
        codes = encoded.indices.fill_null(len(distinct)).to_numpy()  # a missing token matches nothing
    # Assign from the lowest priority up, so the first matching class (highest priority) wins.
    for k in reversed(range(len(classes))):
        c = classes[k]
        if c.kind == "marker":
            if markers[c.pattern].any():  # most runs mark no token: skip the (B, T) gather
                out[markers[c.pattern][mask]] = k
        elif text is None:
            continue
        elif c.kind == "regex":
            pattern = re.compile(c.pattern)
            hit = np.fromiter((bool(pattern.search(t)) for t in distinct), dtype=bool, count=len(distinct))
            out[np.append(hit, False)[codes]] = k
        else:
            out[_flat_phrase_hits(text, lengths, c.phrases)] = k
    return out


def _flat_phrase_hits(text: pa.Array, lengths: np.ndarray, phrases: list[str]) -> np.ndarray:
    """(N,) bool over the flat tokens (`lengths`: tokens per response): tokens overlapping an occurrence of
    any phrase in their response's lowered text, overlapping occurrences included.

    The whole batch is one string, its responses joined by NUL (no phrase holds one, so no occurrence spans
    two responses), searched once per phrase by `str.find`; the occurrences map to token ranges in one
    vectorized step. A regex tried at every position of every response, in Python, was the largest cost
    of a whole run's credit summaries (about 1 s per million tokens)."""
    lowered = pc.utf8_lower(text.fill_null(""))  # per token: offsets stay those of the lowered text
    n = len(lowered)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    chars = pc.utf8_length(lowered).to_numpy(zero_copy_only=False).astype(np.int64)
    responses = pc.binary_join(pa.LargeListArray.from_arrays(pa.array(offsets), lowered), "").to_pylist()
    joined = "\0".join(responses)
    # where each token starts in `joined`: its response's separators before it, plus the characters before it
    row = np.repeat(np.arange(len(lengths)), lengths)
    starts = np.concatenate([[0], np.cumsum(chars)[:-1]]) + row if n else np.zeros(0, dtype=np.int64)
    begin, end = [], []
    for phrase in dict.fromkeys(phrases):
        at = joined.find(phrase)
        while at != -1:
            begin.append(at)
            end.append(at + len(phrase))
            at = joined.find(phrase, at + 1)
    if not begin:
        return np.zeros(n, dtype=bool)
    first = np.searchsorted(starts, np.array(begin), side="right") - 1
    last = np.searchsorted(starts, np.array(end), side="left") - 1
    # +1 where an occurrence's first token is, -1 after its last: covered tokens have a positive running sum
    opened = np.bincount(first, minlength=n + 1) - np.bincount(last + 1, minlength=n + 1)
    return np.cumsum(opened[:n]) > 0


def class_ids(batch: RolloutBatch, classes: tuple[TokenClass, ...] = DEFAULT_CLASSES) -> np.ndarray:
    """(B, T) int64 index into `names(classes)`, -1 on padding. Without token text only markers and
    `other` are known."""
    mask = batch.response_mask.cpu().numpy().astype(bool)
    out = np.full(mask.shape, -1, dtype=np.int64)
    out[mask] = flat_class_ids(batch, classes)
    return out


def labels(batch: RolloutBatch, row: int, classes: tuple[TokenClass, ...] = DEFAULT_CLASSES) -> list[str]:
    """The class name of every real token of response `row`."""
    ids = class_ids(batch, classes)[row]
    label = names(classes)
    return [label[c] for c in ids[ids >= 0]]
