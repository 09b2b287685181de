"""Validation of native records and their columnar buffering into Arrow chunks.

`validate_record` checks one native-format dict (docs/importing.md) against the field rules of
`native_rules` and raises `InputError` naming the file, the line or record, and the field.
`ChunkBuffer` collects validated records column-wise and turns them into the Arrow tables the store
inserts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from backend.core import turns as agent_turns
from backend.core.batch_fields import PER_TOKEN_FIELDS
from backend.core.errors import InputError, quoted
from backend.ingest import native_rules as rules
from backend.ingest.native_rules import FLOAT32_MAX, ID_LIMIT, STEP_LIMIT
from backend.ingest.tokenize import Tokenizer


def group_key(step: int, group: str | int | None, prompt: str) -> str:
    """Responses with the same key form a group: the explicit `group` of a step, else the prompt text."""
    return f"{step}\x1f{'g' if group is not None else 'p'}\x1f{group if group is not None else prompt}"


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_finite(x: int | float, limit: float = math.inf) -> bool:
    """True for a number that is finite as a float and within `limit` (huge JSON ints overflow float)."""
    try:
        return math.isfinite(x) and abs(float(x)) <= limit
    except OverflowError:
        return False


def check_text(value: str, where: str, name: str) -> str:
    """JSON escapes can smuggle unpaired UTF-16 surrogates into a str; the store needs valid UTF-8."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(
            f"{where}: field {name!r} has an unpaired surrogate at character {exc.start}; "
            "text must be valid Unicode"
        ) from None
    return value


def _kind(value: Any) -> str:
    """A bad value described without quoting its text: the app shows import errors to whoever can reach
    it, and the file may hold what they must not read. Numbers are shown; they say what is out of range."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value!r:.40}"
    names = {type(None): "null", bool: "a boolean", str: "a string", list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


_PLAIN_NUMBERS = frozenset({int, float})


def _float_list(value: Any, where: str, name: str) -> list[float]:
    if not isinstance(value, list):
        raise InputError(f"{where}: field {name!r} must be a list of numbers, got {type(value).__name__}")
    if set(map(type, value)) <= _PLAIN_NUMBERS:  # the usual list, checked without a call per value
        try:
            floats = list(map(float, value))
        except OverflowError:  # an int beyond float range: named below
            floats = None
        if floats is not None and all(-FLOAT32_MAX <= x <= FLOAT32_MAX for x in floats):  # NaN fails too
            return floats
    for k, x in enumerate(value):  # the first bad value, named (subclasses such as numpy's float64 too)
        if not _is_number(x):
            raise InputError(f"{where}: field {name!r}[{k}] must be a number, got {_kind(x)}")
        if not _is_finite(x, FLOAT32_MAX):
            raise InputError(
                f"{where}: field {name!r}[{k}] is {x!r:.40} (must be finite and within float32 range)"
            )
    return [float(x) for x in value]


def _int_list(value: Any, where: str, name: str) -> list[int]:
    if not isinstance(value, list):
        raise rules.must_be(where, name, f", got {type(value).__name__}")
    for k, x in enumerate(value):
        if not _is_int(x):
            raise InputError(f"{where}: field {name!r}[{k}] must be an integer, got {_kind(x)}")
        if not -ID_LIMIT <= x < ID_LIMIT:
            raise InputError(f"{where}: field {name!r}[{k}] = {x} does not fit a 32-bit token id")
    return value


def _check_length(values: list, n: int, where: str, name: str, origin: str) -> None:
    if len(values) != n:
        raise rules.length_mismatch(where, name, len(values), origin, n)


def validate_record(rec: Any, where: str, tokenizer: Tokenizer, allow_unscorable: bool = False) -> dict:
    """Check one native record and return it normalized (token ids filled, floats finite).
    `allow_unscorable`: `rewards` may be empty (a TRL row whose reward functions all returned None)."""
    if not isinstance(rec, dict):
        raise InputError(f"{where}: a record must be a JSON object, got {type(rec).__name__}")
    for name in rules.REQUIRED:
        if name not in rec:
            raise rules.missing(where, name)
        if name in rules.of_kind(rules.TEXT):
            _text(rec[name], where, name)
    rewards = _scores(rec["rewards"], where, allow_unscorable)
    group = _group(rec.get("group"), where)
    step = rec.get("step", 0)
    if not _is_int(step) or not 0 <= step < STEP_LIMIT:
        raise rules.must_be(where, "step", f", got {_kind(step)}")
    meta = _meta(rec.get("meta", {}), where)
    token_ids, tokens, origin, tokenized = _token_ids(rec, where, tokenizer)
    prompt_ids = rec.get("prompt_ids")
    out = {
        "prompt": rec["prompt"],
        "response": rec["response"],
        "step": step,
        "group_key": group_key(step, group, rec["prompt"]),
        "prompt_ids": None if prompt_ids is None else _int_list(prompt_ids, where, "prompt_ids"),
        "token_ids": token_ids,
        "tokens": _labels(rec, tokens, token_ids, where, tokenizer, origin),
        "rewards": {str(k): float(v) for k, v in rewards.items()},
        "meta": meta,
        "tokenized": tokenized,
        "ground_truth": rec.get("ground_truth", meta.get("ground_truth")),
    }
    n = len(token_ids)
    for name in rules.of_kind(rules.PER_TOKEN):
        value = rec.get(name)
        if value is not None:
            value = _float_list(value, where, name)
            _check_length(value, n, where, name, origin)
        out[name] = value
    for name in rules.of_kind(rules.PER_TOKEN_MAP):
        out[name] = _per_token_map(rec.get(name) or {}, where, name, n, origin)
    for name in rules.of_kind(rules.FEATURE):  # stored as the token feature of the same name
        value = rec.get(name)
        if value is not None:
            value = _float_list(value, where, name)
            _check_length(value, n, where, name, origin)
            out["extras"][name] = value
    out.update(_agent_fields(rec, where, n, origin))
    out["metrics"] = _metrics(rec.get("metrics"), where)
    out["logged_advantage"] = _logged_advantage(rec.get("logged_advantage"), where)
    key = rec.get("record_key")
    out["record_key"] = key if _is_int(key) and -(2**63) <= key < 2**63 else None
    out["ground_truth"] = _ground_truth(out["ground_truth"], where)
    return out


def _text(value: Any, where: str, name: str) -> str:
    if not isinstance(value, str):
        raise rules.must_be(where, name, f", got {type(value).__name__}")
    return check_text(value, where, name)


def _scores(rewards: Any, where: str, allow_unscorable: bool) -> dict:
    if not isinstance(rewards, dict) or not (rewards or allow_unscorable):
        raise rules.must_be(where, "rewards")
    for channel, score in rewards.items():
        check_text(str(channel), where, "rewards")
        rules.check_channel_name(where, str(channel))
        field = quoted(f"rewards.{channel}")
        if not _is_number(score):
            raise InputError(f"{where}: field {field} must be a number, got {_kind(score)}")
        if not _is_finite(score, FLOAT32_MAX):  # estimators read scores as float32
            raise InputError(f"{where}: field {field} is {score!r:.40} (must be finite, within float32)")
    return rewards


def _group(group: Any, where: str) -> str | int | None:
    if group is not None and not (isinstance(group, str) or _is_int(group)):
        raise rules.must_be(where, "group", f", got {_kind(group)}")
    if isinstance(group, str):
        check_text(group, where, "group")
    return group


def _meta(meta: Any, where: str) -> dict:
    if meta is None:
        return {}
    if isinstance(meta, str):  # JSON text, as the TRL recorder writes it and the fast Parquet path reads it
        try:
            meta = json.loads(meta)
        except (ValueError, RecursionError):
            raise rules.must_be(where, "meta", ", got text that is not JSON") from None
    if not isinstance(meta, dict):
        raise rules.must_be(where, "meta", f", got {type(meta).__name__}")
    try:  # DuckDB's JSON type refuses \udXXX escapes of unpaired surrogates anywhere inside
        json.dumps(meta, default=str, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{where}: field 'meta' holds text with an unpaired surrogate") from None
    return meta


def _token_ids(rec: dict, where: str, tokenizer: Tokenizer) -> tuple[list[int], list | None, str, str]:
    """(token ids, token labels or None, what the per-token lists are counted against, tokenization)."""
    if rec.get("token_ids") is not None:  # a reader that made them from text names its tokenization
        tokenized = rec.get("tokenized_with") or "ids"
        return _int_list(rec["token_ids"], where, "token_ids"), None, "'token_ids'", tokenized
    token_ids, tokens = tokenizer.encode(rec["response"])
    return token_ids, tokens, f"the re-tokenized response ({tokenizer.name})", tokenizer.name


def _labels(
    rec: dict, tokens: list | None, token_ids: list[int], where: str, tokenizer: Tokenizer, origin: str
) -> list[str]:
    """The record's own `tokens` (checked), else the tokenizer's."""
    if rec.get("tokens") is not None:
        tokens = rec["tokens"]
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise rules.must_be(where, "tokens")
        for token in tokens:
            check_text(token, where, "tokens")
        _check_length(tokens, len(token_ids), where, "tokens", origin)
        return tokens
    return tokenizer.display(token_ids) if tokens is None else tokens


def _per_token_map(value: Any, where: str, name: str, n: int, origin: str) -> dict[str, list[float]]:
    if not isinstance(value, dict):
        raise rules.must_be(where, name)
    checked = {}
    for channel, arr in value.items():
        check_text(str(channel), where, name)
        if name == "token_rewards":  # its keys are channels (extras' are feature names)
            rules.check_channel_name(where, str(channel), "field 'token_rewards' names the channel")
        arr = _float_list(arr, where, f"{name}.{channel}")
        _check_length(arr, n, where, f"{name}.{channel}", origin)
        checked[str(channel)] = arr
    return checked


def _agent_fields(rec: dict, where: str, n: int, origin: str) -> dict:
    """`loss_mask`, `turns` and `turn_rewards` of an agent's (multi-turn) response, checked; each implies the
    other when only one is given (`backend.core.turns`). A record with none of them keeps None."""
    mask, turns, rewards = rec.get("loss_mask"), rec.get("turns"), rec.get("turn_rewards")
    if mask is not None:
        if not isinstance(mask, list):
            raise rules.must_be(where, "loss_mask", f", got {_kind(mask)}")
        for k, m in enumerate(mask):
            if not _is_number(m) and not isinstance(m, bool) or m not in (0, 1):
                raise InputError(f"{where}: field 'loss_mask'[{k}] must be 0 or 1, got {_kind(m)}")
        _check_length(mask, n, where, "loss_mask", origin)
        mask = [int(m) for m in mask]
    if turns is not None:
        turns = _turns(turns, where, n, origin)
    if rewards is not None:
        if not isinstance(rewards, list):
            raise rules.must_be(where, "turn_rewards", f", got {_kind(rewards)}")
        for k, x in enumerate(rewards):
            if x is not None and (not _is_number(x) or not _is_finite(x, FLOAT32_MAX)):
                raise InputError(
                    f"{where}: field 'turn_rewards'[{k}] must be a finite number or null, got {_kind(x)}"
                )
        if mask is None and turns is None:
            raise InputError(
                f"{where}: field 'turn_rewards' needs 'turns' (or a 'loss_mask') to say which turns"
            )
    if mask is None and turns is not None:
        mask = agent_turns.mask_from_turns(turns, n)
    if turns is None and mask is not None:
        turns = agent_turns.spans_from_mask(mask)
    if rewards is not None:
        n_assistant = len(agent_turns.assistant_turns(turns))
        if len(rewards) != n_assistant:
            raise InputError(
                f"{where}: field 'turn_rewards' has {len(rewards)} entries but the response has "
                f"{n_assistant} assistant turns; give one score (or null) per assistant turn"
            )
        rewards = [None if x is None else float(x) for x in rewards]
    return {"loss_mask": mask, "turns": turns, "turn_rewards": rewards}


def _turns(turns: Any, where: str, n: int, origin: str) -> list[dict]:
    if not isinstance(turns, list):
        raise rules.must_be(where, "turns", f", got {_kind(turns)}")
    out, end_before = [], 0
    for k, turn in enumerate(turns):
        if not isinstance(turn, dict) or set(turn) - {"role", "start", "end"}:
            raise InputError(f"{where}: field 'turns'[{k}] must be an object with role, start and end")
        role, start, end = turn.get("role"), turn.get("start"), turn.get("end")
        if role not in agent_turns.ROLES:
            raise InputError(
                f"{where}: field 'turns'[{k}].role must be one of {', '.join(agent_turns.ROLES)}, got "
                f"{_kind(role) if not isinstance(role, str) else 'another string'}"
            )
        for name, x in (("start", start), ("end", end)):
            if not _is_int(x):
                raise InputError(f"{where}: field 'turns'[{k}].{name} must be an integer, got {_kind(x)}")
        if not end_before <= start < end:
            raise InputError(
                f"{where}: field 'turns'[{k}] spans [{start}, {end}): turns must be non-empty, in order and "
                f"not overlap (the previous one ends at {end_before})"
            )
        if end > n:
            raise InputError(
                f"{where}: field 'turns'[{k}].end = {end} is past the response's {n} tokens ({origin})"
            )
        out.append({"role": role, "start": start, "end": end})
        end_before = end
    return out


def _logged_advantage(adv: Any, where: str) -> float | int | None:
    if adv is not None and (not _is_number(adv) or not _is_finite(adv)):
        raise rules.must_be(where, "logged_advantage", f", got {_kind(adv)}")
    return adv


def _ground_truth(truth: Any, where: str) -> str | None:
    if truth is not None and not isinstance(truth, str):
        truth = json.dumps(truth)
    if truth is not None:
        check_text(truth, where, "ground_truth")
    return truth


def _metrics(value: Any, where: str) -> dict[str, float]:
    """`metrics`: name -> number per rollout, never a reward (booleans count as 1/0: verl logs `acc` as
    true/false); a null is no value."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise rules.must_be(where, "metrics", f", got {_kind(value)}")
    out = {}
    for name, x in value.items():
        check_text(str(name), where, "metrics")
        if x is None:
            continue
        if not isinstance(x, (int, float)):
            raise InputError(f"{where}: field {quoted(f'metrics.{name}')} must be a number, got {_kind(x)}")
        if not _is_finite(x):
            raise InputError(f"{where}: field {quoted(f'metrics.{name}')} is {x!r:.40} (must be finite)")
        out[str(name)] = float(x)
    return out


@dataclass
class ChunkBuffer:
    """Validated records of one import, buffered column-wise until `flush`."""

    run_id: int
    next_rollout_id: int
    group_keys: dict[str, int]
    rows: list[dict] = field(default_factory=list)
    new_groups: list[dict] = field(default_factory=list)

    def group_id(self, key: str, step: int, prompt: str, ground_truth: str | None) -> int:
        """The id of group `key`; a key not seen before gets the next id and joins `new_groups`."""
        gid = self.group_keys.get(key)
        if gid is None:
            gid = self.group_keys[key] = len(self.group_keys)
            self.new_groups.append(
                {
                    "group_id": gid,
                    "group_key": key,
                    "step": step,
                    "prompt": prompt,
                    "ground_truth": ground_truth,
                }
            )
        return gid

    def add(self, rec: dict) -> None:
        rec["group_id"] = self.group_id(rec["group_key"], rec["step"], rec["prompt"], rec["ground_truth"])
        rec["rollout_id"] = self.next_rollout_id
        self.next_rollout_id += 1
        self.rows.append(rec)

    def __len__(self) -> int:
        return len(self.rows)

    def flush(self) -> dict[str, pa.Table]:
        """Arrow tables for rollouts, scores, token_rewards, token_features, rollout_metrics, groups;
        empties the buffer."""
        rows, self.rows = self.rows, []
        run = self.run_id
        f32 = pa.list_(pa.float32())
        tables = {
            "rollouts": pa.table(
                {
                    "run_id": pa.array([run] * len(rows), pa.int32()),
                    "rollout_id": pa.array([r["rollout_id"] for r in rows], pa.int32()),
                    "group_id": pa.array([r["group_id"] for r in rows], pa.int32()),
                    "step": pa.array([r["step"] for r in rows], pa.int32()),
                    "prompt": [r["prompt"] for r in rows],
                    "response": [r["response"] for r in rows],
                    "prompt_ids": pa.array([r["prompt_ids"] for r in rows], pa.list_(pa.int32())),
                    "token_ids": pa.array([r["token_ids"] for r in rows], pa.list_(pa.int32())),
                    "tokens": pa.array([r["tokens"] for r in rows], pa.list_(pa.string())),
                    **{name: pa.array([r[name] for r in rows], f32) for name in PER_TOKEN_FIELDS},
                    "logged_advantage": pa.array([r["logged_advantage"] for r in rows], pa.float64()),
                    "meta": [json.dumps(r["meta"], default=str, ensure_ascii=False) for r in rows],
                    "record_key": pa.array([r["record_key"] for r in rows], pa.int64()),
                    **agent_columns(rows),
                }
            ),
            "scores": _long_table(run, rows, "rewards", "channel", "score", pa.float64()),
            "token_rewards": _long_table(run, rows, "token_rewards", "channel", "rewards", f32),
            "token_features": _long_table(run, rows, "extras", "name", "vals", f32),
            "rollout_metrics": _long_table(run, rows, "metrics", "name", "value", pa.float64()),
            "groups": self.flush_groups(),
        }
        return tables

    def flush_groups(self) -> pa.Table:
        """The store's `groups` table of the groups first seen since the last flush; empties `new_groups`."""
        groups, self.new_groups = self.new_groups, []
        return pa.table(
            {
                "run_id": pa.array([self.run_id] * len(groups), pa.int32()),
                "group_id": pa.array([g["group_id"] for g in groups], pa.int32()),
                "group_key": pa.array([g["group_key"] for g in groups], pa.string()),
                "step": pa.array([g["step"] for g in groups], pa.int32()),
                "prompt": pa.array([g["prompt"] for g in groups], pa.string()),
                "ground_truth": pa.array([g["ground_truth"] for g in groups], pa.string()),
            }
        )


def agent_columns(rows: list[dict]) -> dict[str, pa.Array]:
    """The rollouts table's agent columns of validated records: loss_mask, turns (JSON), turn_rewards."""
    return {
        "loss_mask": pa.array(
            [None if r.get("loss_mask") is None else [m == 1 for m in r["loss_mask"]] for r in rows],
            pa.list_(pa.bool_()),
        ),
        "turns": pa.array(
            [None if r.get("turns") is None else json.dumps(r["turns"]) for r in rows], pa.string()
        ),
        "turn_rewards": pa.array([r.get("turn_rewards") for r in rows], pa.list_(pa.float64())),
    }


def _long_table(run: int, rows: list[dict], key: str, name_col: str, value_col: str, value_type) -> pa.Table:
    ids, names, values = [], [], []
    for r in rows:
        for channel, value in r[key].items():
            ids.append(r["rollout_id"])
            names.append(channel)
            values.append(value)
    return pa.table(
        {
            "run_id": pa.array([run] * len(ids), pa.int32()),
            "rollout_id": pa.array(ids, pa.int32()),
            name_col: pa.array(names, pa.string()),
            value_col: pa.array(values, value_type),
        }
    )
