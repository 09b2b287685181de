"""The native record's fields, declared once: which are required, what each must hold, and the limits its
values keep. Every native reader reads this table: `records.validate_record` (one record at a time),
`fast_parquet.convert_batch` (an Arrow column at a time) and `fast_jsonl`'s pre-checks (which fields it
builds as columns); their errors say `{where}: field 'NAME' must be EXPECTS...` from the same words.

Each reader still words what only it sees (an Arrow column type, the row of a bad value in a column).
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.core.batch_fields import PER_TOKEN_FIELDS
from backend.core.errors import InputError, has_control, quoted

FLOAT32_MAX = 3.4028234663852886e38
"""Per-token lists and scores are read as float32: a larger magnitude would silently become inf."""
ID_LIMIT = 2**31
"""Token ids are stored as 32-bit integers: -ID_LIMIT <= id < ID_LIMIT."""
STEP_LIMIT = 2**31
"""Steps are stored as 32-bit integers: 0 <= step < STEP_LIMIT."""

TEXT, GROUP, STEP, IDS, LABELS, PER_TOKEN, SCORES, PER_TOKEN_MAP, METRICS, META, NUMBER, OTHER, AGENT = (
    "text",
    "group",
    "step",
    "ids",
    "labels",
    "per-token",
    "scores",
    "per-token map",
    "metrics",
    "meta",
    "number",
    "other",
    "agent",
)
FEATURE = "per-token feature"
"""A per-token list of numbers kept as the token feature of its own name (table token_features, like an
`extras` entry): `logprobs_after`, which no estimator reads and the landed numbers do."""


@dataclass(frozen=True)
class FieldRule:
    name: str
    kind: str
    """What the field holds (the constants above): which check each reader applies."""
    expects: str
    """What the field must be, as the errors say it ("a list of integers")."""
    required: bool = False
    hint: str = ""
    """Said after "missing required field" when it is missing."""


RULES: tuple[FieldRule, ...] = (
    FieldRule("prompt", TEXT, "a string", required=True),
    FieldRule("response", TEXT, "a string", required=True),
    FieldRule(
        "rewards",
        SCORES,
        "a non-empty dict channel -> number",
        required=True,
        hint='a dict channel -> score, e.g. {"task": 1}',
    ),
    FieldRule("group", GROUP, "a string or an integer"),
    FieldRule("step", STEP, "a non-negative integer"),
    FieldRule("prompt_ids", IDS, "a list of integers"),
    FieldRule("token_ids", IDS, "a list of integers"),
    FieldRule("tokens", LABELS, "a list of strings"),
    *(FieldRule(name, PER_TOKEN, "a list of numbers") for name in PER_TOKEN_FIELDS),
    FieldRule("token_rewards", PER_TOKEN_MAP, "a dict channel -> list of numbers"),
    FieldRule("extras", PER_TOKEN_MAP, "a dict channel -> list of numbers"),
    FieldRule("metrics", METRICS, "an object name -> number"),
    FieldRule("meta", META, "an object"),
    FieldRule("logged_advantage", NUMBER, "a finite number"),
    FieldRule("ground_truth", OTHER, "a string or JSON"),
    FieldRule("record_key", OTHER, "a 64-bit integer"),
    FieldRule("loss_mask", AGENT, "a list of 0/1, one per response token (1: trained)"),
    FieldRule(
        "turns",
        AGENT,
        'a list of {"role", "start", "end"} token spans (end exclusive, in order, not overlapping; role one '
        "of assistant, tool, user, environment, system)",
    ),
    FieldRule("turn_rewards", AGENT, "a list of numbers or nulls, one per assistant turn"),
    FieldRule("logprobs_after", FEATURE, "a list of numbers, one per response token"),
)
FIELDS = {rule.name: rule for rule in RULES}
KNOWN_FIELDS = frozenset(FIELDS)


def of_kind(*kinds: str) -> tuple[str, ...]:
    """The names of the fields of these kinds, in the table's order."""
    return tuple(rule.name for rule in RULES if rule.kind in kinds)


REQUIRED = tuple(rule.name for rule in RULES if rule.required)
PER_RECORD_ONLY = frozenset(of_kind(AGENT, FEATURE))
"""Fields only the per-record reader validates and stores: the column readers fall back to it."""


def missing(where: str, name: str) -> InputError:
    hint = FIELDS[name].hint
    return InputError(f"{where}: missing required field {name!r}" + (f" ({hint})" if hint else ""))


def must_be(where: str, name: str, detail: str = "") -> InputError:
    """`{where}: field 'NAME' must be EXPECTS{detail}`; `detail` says what it is instead."""
    return InputError(f"{where}: field {name!r} must be {FIELDS[name].expects}{detail}")


def length_mismatch(where: str, name: str, got: int, origin: str, n: int, why: bool = True) -> InputError:
    """A per-token list whose length is not the response's token count."""
    tail = "; per-token lists must have one entry per response token" if why else ""
    return InputError(f"{where}: field {name!r} has {got} entries but {origin} has {n}{tail}")


def check_channel_name(where: str, name: str, source: str = "field 'rewards' names the channel") -> None:
    """A channel name may hold any text but a control character: the name is printed in tables, legends and
    commands (`--channel NAME`), where a line break or an escape would break the line or the terminal."""
    if has_control(name):
        raise InputError(
            f"{where}: {source} {quoted(name)}, with a control character; channel names may not hold one"
        )
