"""The TRL reader: GRPO completion logs (`completions/completions_*.parquet`: step, prompt, completion, one
column per reward function, any `log_extra` columns, advantage) -> native records, as the other readers
of `backend.ingest.sources` yield them."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from backend.core.errors import InputError, named, quoted
from backend.core.run_config import TRL_EPSILON
from backend.ingest import trl_turns
from backend.ingest.native_rules import check_channel_name
from backend.ingest.sources import (
    PARQUET_ERRORS,
    Progress,
    ReadNotes,
    _channel_list,
    _plain,
    check_columns,
    iter_parquet_rows,
    record_key,
)
from backend.ingest.tokenize import Tokenizer

TRL_RESERVED = {"step", "prompt", "completion", "advantage", "image", "images"}


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_boolean(t)


def render_messages(messages: list, tokenizer=None) -> str:
    """A conversation as prompt text: the tokenizer's chat template when it has one (what TRL fed the
    model, with the generation prompt), else one `role: content` line per message."""
    hf = getattr(tokenizer, "hf", None)
    if hf is not None and getattr(hf, "chat_template", None):
        try:
            return hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception:  # noqa: BLE001 - a template that rejects these messages: the plain rendering
            pass
    return "".join(f"{m.get('role', '?')}: {trl_turns.content_text(m.get('content'))}\n" for m in messages)


def _is_messages(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value)


def _runs(prompt_keys: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Start index of each run of equal consecutive (step, prompt) rows: (R,) int64."""
    n = len(prompt_keys)
    change = np.ones(n, dtype=bool)
    change[1:] = (prompt_keys[1:] != prompt_keys[:-1]) | (steps[1:] != steps[:-1])
    return np.flatnonzero(change)


def trl_blocks(
    prompt_keys: np.ndarray, steps: np.ndarray, size: int | None, path: Path, stated: bool
) -> np.ndarray:
    """Group index per row of one TRL completions table: (N,) int64.

    TRL logs each prompt's `num_generations` completions as one consecutive block, so two dataset rows
    with the same prompt text are two groups. With a block `size`, runs of equal consecutive prompts
    are cut into blocks of that size (a `stated` --group-size must divide every step's row count); with
    `size` None each run is a group.
    """
    n = len(prompt_keys)
    if size is None:
        starts = _runs(prompt_keys, steps)
    else:
        if stated:
            step_starts = np.flatnonzero(np.r_[True, steps[1:] != steps[:-1]]) if n else np.zeros(0, int)
            for a, b in zip(step_starts, [*step_starts[1:], n], strict=True):
                if (b - a) % size:
                    raise InputError(
                        f"{path}: record {a + 1}: its step has {b - a} rows, not a multiple of "
                        f"--group-size {size}"
                    )
            starts = step_starts
        else:
            starts = _runs(prompt_keys, steps)
        bounds = np.r_[starts, n]
        starts = np.concatenate(
            [np.arange(a, b, size) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
            or [np.zeros(0, np.int64)]
        )
    group = np.zeros(n, dtype=bool)
    group[starts] = True
    return np.cumsum(group) - 1


def _prompt_keys(path: Path, has_step: bool) -> tuple[np.ndarray, np.ndarray]:
    """(N,) int64 hashes of the prompts (text or messages) and of the steps of a TRL table."""
    try:
        head = pq.read_table(path, columns=["prompt", *(["step"] if has_step else [])])
    except PARQUET_ERRORS as exc:
        raise InputError(f"{path}: damaged Parquet data ({str(exc).splitlines()[0]})") from None
    check_columns(head, str(path))
    keys = np.fromiter(
        (
            hash(p if isinstance(p, str) else json.dumps(p, sort_keys=True, default=str))
            for p in head.column("prompt").to_pylist()
        ),
        dtype=np.int64,
        count=head.num_rows,
    )
    # Steps only need comparing here; the record validator names a step that is not an integer.
    steps = (
        np.fromiter(
            (hash(repr(s)) for s in head.column("step").to_pylist()), dtype=np.int64, count=head.num_rows
        )
        if has_step
        else np.zeros(head.num_rows, dtype=np.int64)
    )
    return keys, steps


def trl_records(
    files: list[Path],
    progress: Progress | None = None,
    notes: ReadNotes | None = None,
    channels: list[str] | None = None,
    group_size: int | None = None,
    tokenizer=None,
) -> Iterator[tuple[str, dict]]:
    """TRL completion logs -> native records.

    Channels: the float columns (TRL's reward functions), or `channels`; one channel is named `task`.
    NaN (a reward function returned None) is a missing score; a row with none is unscorable. Other
    numeric columns (`log_extra` numbers, float columns `channels` leaves out) are per-rollout metrics;
    the rest (strings, lists) go to meta per rollout. Conversational rows keep their
    messages in meta; the response is the assistant content, the prompt the rendered messages. A
    tool-calling completion (a tool's message among them) is every message placed on tokens, with its
    turns and loss mask (`backend.ingest.trl_turns`).
    """
    notes = notes if notes is not None else ReadNotes()
    tokenizer = tokenizer if tokenizer is not None else Tokenizer()
    # First pass, prompts only: the run sizes of every file give the common group size.
    schemas, prompt_keys = _read_prompts(files)
    common, split = _common_group_size(prompt_keys, group_size, notes)
    for path in files:
        blocks = trl_blocks(
            *prompt_keys.pop(path),
            common if (split or group_size) else None,
            path,
            stated=group_size is not None,
        )
        names, metric_cols, meta_cols = _column_roles(path, schemas[path], channels, notes)
        for index, (where, row) in enumerate(iter_parquet_rows(path, progress)):
            rewards = _row_rewards(row, names)
            if not rewards:
                notes.unscorable += 1
            metrics = {c: row.get(c) for c in metric_cols}  # NaN (a null log_extra value): no value
            metrics = {c: v for c, v in metrics.items() if not (isinstance(v, float) and math.isnan(v))}
            prompt, completion, meta = _texts(where, row, meta_cols, tokenizer)
            turns = {}
            if _is_messages(row["completion"]) and trl_turns.has_other_roles(row["completion"]):
                turns, note = trl_turns.completion_fields(row["prompt"], row["completion"], tokenizer)
                notes.add(note)
            adv = row.get("advantage")
            if isinstance(adv, float) and math.isnan(adv):
                adv = None
            if adv is not None:
                meta["advantage_epsilon"] = TRL_EPSILON  # scale_rewards is not in the log
            step = row.get("step") or 0
            if isinstance(step, float) and step.is_integer():
                step = int(step)
            yield (
                where,
                {
                    "prompt": prompt,
                    "response": completion,
                    "step": step,  # the validator names a step that is not a non-negative integer
                    "group": f"block {int(blocks[index])}",
                    "rewards": rewards,
                    "logged_advantage": adv,
                    "metrics": metrics,
                    "meta": meta,
                    "record_key": record_key(path.name, index, row),
                    **turns,  # a tool-calling completion: its messages on tokens, turns and loss mask
                },
            )


def _read_prompts(files: list[Path]) -> tuple[dict, dict]:
    """Each file's schema (it must have `prompt` and `completion`) and its prompt and step keys
    (`_prompt_keys`)."""
    schemas, prompt_keys = {}, {}
    for path in files:
        try:
            schemas[path] = pq.read_schema(path)
        except PARQUET_ERRORS as exc:
            raise InputError(f"{path}: not a readable Parquet file ({exc})") from None
        for name in ("prompt", "completion"):
            if name not in schemas[path].names:
                raise InputError(f"{path}: missing required TRL column {name!r}")
        prompt_keys[path] = _prompt_keys(path, "step" in schemas[path].names)
    return schemas, prompt_keys


def _common_group_size(prompt_keys: dict, group_size: int | None, notes: ReadNotes) -> tuple[int, bool]:
    """The group size common to every file (the stated `group_size`, else the smallest run of equal
    prompts) and whether longer runs are cut into blocks of it (every run a multiple of it); notes how
    groups were formed."""
    sizes = np.concatenate(
        [np.diff(np.r_[_runs(*k), len(k[0])]) for k in prompt_keys.values()] or [np.zeros(0, np.int64)]
    )
    common = group_size or (int(sizes.min()) if len(sizes) else 1)
    split = group_size is None and bool(len(sizes)) and bool((sizes % common == 0).all())
    n_split = int((sizes > common).sum()) if split else 0
    if group_size is not None:
        notes.add(f"groups: blocks of {group_size} consecutive rows (--group-size)")
    elif n_split:
        notes.add(
            f"groups: {n_split} prompt-text group(s) of a multiple of {common} rows split into blocks "
            f"of {common} (TRL's num_generations; state it with --group-size)"
        )
    else:
        notes.add("groups: consecutive rows with the same prompt text")
    return common, split


def _column_roles(
    path: Path, schema: pa.Schema, channels: list[str] | None, notes: ReadNotes
) -> tuple[dict[str, str], list[str], list[str]]:
    """The file's columns by role: reward column -> channel name, per-rollout metric columns, columns kept
    in meta; notes the mapping."""
    candidates = [f.name for f in schema if f.name not in TRL_RESERVED]
    if channels is not None:
        reward_cols = _channel_list(channels, candidates, str(path))
        for col in reward_cols:
            t = schema.field(col).type
            if not _is_numeric(t):
                raise InputError(f"{path}: --channels column {col!r} is {quoted(t)}, not numeric")
    else:
        reward_cols = [c for c in candidates if pa.types.is_floating(schema.field(c).type)]
    for col in reward_cols:
        check_channel_name(str(path), col, "the reward column")
    if not reward_cols:
        raise InputError(
            f"{path}: no reward columns (float columns besides advantage); name them with --channels"
        )
    others = [c for c in candidates if c not in reward_cols]
    metric_cols = [c for c in others if _is_numeric(schema.field(c).type)]
    meta_cols = [c for c in others if c not in metric_cols]
    names = {reward_cols[0]: "task"} if len(reward_cols) == 1 else {c: c for c in reward_cols}
    notes.channels.update(dict.fromkeys(names.values()))
    notes.add(
        "channels: "
        + ", ".join(f"{named(c)} -> {ch}" if c != ch else named(c) for c, ch in names.items())
        + (
            f"; metrics (per rollout, not rewards): {', '.join(map(named, metric_cols))}"
            if metric_cols
            else ""
        )
        + (f"; kept in meta: {', '.join(map(named, meta_cols))}" if meta_cols else "")
    )
    return names, metric_cols, meta_cols


def _row_rewards(row: dict, names: dict[str, str]) -> dict[str, float]:
    """channel -> score of one row (`names`: reward column -> channel)."""
    rewards = {}
    for col, channel in names.items():
        value = row.get(col)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue  # TRL logs NaN where a reward function returned None: no score there
        rewards[channel] = float(value)
    return rewards


def _texts(where: str, row: dict, meta_cols: list[str], tokenizer) -> tuple[str, str, dict]:
    """A row's prompt and response text and its meta; a conversation's messages are kept in meta, the
    prompt rendered (`render_messages`) and the response the assistant's content."""
    meta = {c: _plain(row.get(c)) for c in meta_cols}
    prompt, completion = row["prompt"], row["completion"]
    if _is_messages(prompt):
        meta["prompt_messages"] = _plain(prompt)
        prompt = render_messages(prompt, tokenizer)
    elif not isinstance(prompt, str):
        raise InputError(
            f"{where}: field 'prompt' must be text or a list of {{role, content}} "
            f"messages, got {type(prompt).__name__}"
        )
    if _is_messages(completion):
        meta["completion_messages"] = _plain(completion)
        completion = "".join(
            trl_turns.content_text(m.get("content")) for m in completion if m.get("role") == "assistant"
        )
    elif not isinstance(completion, str):
        raise InputError(
            f"{where}: field 'completion' must be text or a list of {{role, content}} "
            f"messages, got {type(completion).__name__}"
        )
    return prompt, completion, meta
