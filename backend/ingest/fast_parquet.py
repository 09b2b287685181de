"""Vectorized import of native Parquet files that carry `token_ids` (the large-run path).

Each record batch is checked with Arrow compute (types, per-token list lengths, finiteness) and moved
into the store's tables without building python lists of tokens. Anything this path does not
understand raises `Unsupported`, and the importer falls back to the per-record reader.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from backend.core.errors import InputError, quoted
from backend.ingest import native_rules as rules
from backend.ingest.native_rules import FLOAT32_MAX, STEP_LIMIT
from backend.ingest.records import ChunkBuffer


class Unsupported(Exception):
    pass


def _first_bad(mask: pa.Array) -> int:
    return int(np.flatnonzero(mask.to_numpy(zero_copy_only=False))[0])


def _check_float_lists(col: pa.Array, n_tokens: np.ndarray, name: str, where) -> pa.Array:
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
        raise InputError(f"{where(_first_non_null(col))}: field {name!r} must be a list of numbers")
    if not (pa.types.is_floating(col.type.value_type) or pa.types.is_integer(col.type.value_type)):
        has = quoted(col.type.value_type)
        raise InputError(f"{where(0)}: field {name!r} must be a list of numbers, has {has}")
    lengths = col.value_lengths().fill_null(-1).to_numpy(zero_copy_only=False)
    present = lengths >= 0
    bad = present & (lengths != n_tokens)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise rules.length_mismatch(where(i), name, lengths[i], "'token_ids'", n_tokens[i])
    values = col.flatten().cast(pa.float64())
    # float32 storage: magnitudes past its range would become inf, so they count as not finite here.
    finite = pc.and_(pc.is_finite(values), pc.less_equal(pc.abs(values), FLOAT32_MAX)).fill_null(False)
    if not pc.all(finite).as_py() and len(values):
        flat = _first_bad(pc.invert(finite))
        row = int(pc.list_parent_indices(col).to_numpy()[flat])
        raise InputError(
            f"{where(row)}: field {name!r} has a NaN, infinite, null or out-of-float32-range entry"
        )
    return col.cast(pa.list_(pa.float32()))


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _first_non_null(col: pa.Array) -> int:
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    return int(np.flatnonzero(valid)[0]) if valid.any() else 0


def _ground_truths(batch: pa.RecordBatch, names: set[str], n: int) -> list:
    """`ground_truth` column, else `meta.ground_truth` (a struct field or inside JSON text)."""
    if "ground_truth" in names:
        return batch.column("ground_truth").to_pylist()
    if "meta" in names:
        meta = batch.column("meta")
        if pa.types.is_struct(meta.type) and meta.type.get_field_index("ground_truth") >= 0:
            return meta.field("ground_truth").to_pylist()
        if pa.types.is_string(meta.type):
            out = []
            for text in meta.to_pylist():
                try:
                    value = json.loads(text) if text else None
                except ValueError:
                    value = None
                out.append(value.get("ground_truth") if isinstance(value, dict) else None)
            return out
    return [None] * n


def convert_batch(
    batch: pa.RecordBatch, buffer: ChunkBuffer, path, offset: int, keys: np.ndarray | None = None
) -> dict[str, pa.Table]:
    """Validate one native Parquet record batch against the field rules (`native_rules`) and return the
    store tables for it (`keys`: the rows' record keys, int64)."""

    def where(i: int) -> str:
        return f"{path}: record {offset + i + 1}"

    names = set(batch.schema.names)
    _check_fallbacks(batch, names)
    for name in rules.of_kind(rules.TEXT):
        _check_text(batch, names, name, where)
    token_ids = _token_ids_type(batch.column("token_ids"), where)
    if "group" in names:
        _check_group_type(batch.column("group").type, where)
    n_tokens = token_ids.value_lengths().to_numpy(zero_copy_only=False)
    try:
        token_ids32 = token_ids.cast(pa.list_(pa.int32()))
    except pa.ArrowInvalid:
        raise InputError(f"{where(0)}: field 'token_ids' has ids that do not fit 32 bits") from None
    steps = _steps(batch, names, where)
    score_tables = _scores(batch.column("rewards"), batch.num_rows, where)
    # From here `buffer` changes: every fallback was decided above (the per-record path needs a clean one).
    rollout_ids, group_ids = _ids(batch, names, steps, buffer)
    columns = {
        "run_id": pa.array(np.full(batch.num_rows, buffer.run_id, dtype=np.int32)),
        "rollout_id": pa.array(rollout_ids),
        "group_id": pa.array(group_ids.astype(np.int32)),
        "step": pa.array(steps.astype(np.int32)),
        "prompt": batch.column("prompt"),
        "response": batch.column("response"),
        "token_ids": token_ids32,
    }
    if keys is not None:
        columns["record_key"] = pa.array(keys, pa.int64())
    columns.update(_optional_columns(batch, names, n_tokens, where))
    tables = {"rollouts": pa.table(columns), "scores": _score_table(score_tables, rollout_ids, buffer.run_id)}
    for column, table, name_col, value_col in (
        ("token_rewards", "token_rewards", "channel", "rewards"),
        ("extras", "token_features", "name", "vals"),
    ):
        if column in names:
            parts = _per_token_map(
                batch.column(column), column, n_tokens, where, rollout_ids, buffer.run_id, name_col, value_col
            )
            if parts:
                tables[table] = pa.concat_tables(parts)
    features = [
        _feature(batch.column(name), name, n_tokens, where, rollout_ids, buffer.run_id)
        for name in rules.of_kind(rules.FEATURE)
        if name in names
    ]
    if features:  # stored beside the extras, under the field's own name
        tables["token_features"] = pa.concat_tables(
            [*([tables["token_features"]] if "token_features" in tables else []), *features]
        )
    tables["groups"] = buffer.flush_groups()
    return tables


def _check_fallbacks(batch: pa.RecordBatch, names: set[str]) -> None:
    """`Unsupported` for what the per-record reader must take (before anything touches the buffer)."""
    if "token_ids" not in names or "rewards" not in names or "metrics" in names:
        raise Unsupported  # per-rollout metrics: the per-record reader validates them
    if names & set(rules.of_kind(rules.AGENT)):
        raise Unsupported  # an agent's turns and loss mask: the per-record reader validates them
    for column in ("rewards", *rules.of_kind(rules.PER_TOKEN_MAP)):
        if column in names and not pa.types.is_struct(batch.column(column).type):
            raise Unsupported


def _check_text(batch: pa.RecordBatch, names: set[str], name: str, where) -> None:
    if name not in names:
        raise rules.missing(where(0), name)
    col = batch.column(name)
    if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
        raise rules.must_be(where(0), name, f", column type is {quoted(col.type)}")
    if col.null_count:
        raise rules.missing(where(_first_bad(col.is_null())), name)


def _token_ids_type(token_ids: pa.Array, where) -> pa.Array:
    if not _is_list(token_ids.type) or not pa.types.is_integer(token_ids.type.value_type):
        raise rules.must_be(where(0), "token_ids", f", column type {quoted(token_ids.type)}")
    if token_ids.null_count:
        raise Unsupported  # some rows need re-tokenizing
    return token_ids


def _check_group_type(group_type: pa.DataType, where) -> None:
    if not (
        pa.types.is_string(group_type)
        or pa.types.is_large_string(group_type)
        or pa.types.is_integer(group_type)
        or pa.types.is_null(group_type)
    ):
        raise rules.must_be(where(0), "group", f", column type {quoted(group_type)}")


def _steps(batch: pa.RecordBatch, names: set[str], where) -> np.ndarray:
    if "step" not in names:
        return np.zeros(batch.num_rows, dtype=np.int64)
    col = batch.column("step")
    if not pa.types.is_integer(col.type) or col.null_count:
        raise rules.must_be(where(0), "step")
    too_big = pc.greater_equal(col, STEP_LIMIT)
    if pc.any(too_big).as_py():
        raise InputError(f"{where(_first_bad(too_big))}: field 'step' must be below 2**31")
    steps = col.to_numpy().astype(np.int64)
    if (steps < 0).any():
        raise InputError(f"{where(int(np.flatnonzero(steps < 0)[0]))}: field 'step' must be non-negative")
    return steps


def _scores(rewards: pa.Array, n: int, where) -> list[tuple[str, pa.Array, pa.Array]]:
    """(channel, scores as float64, present) per channel; every row must have a finite score on one."""
    score_tables = []
    any_score = np.zeros(n, dtype=bool)
    # flatten(), not field(k): a child of a null struct row may hold a stale value.
    for field, child in zip(rewards.type, rewards.flatten(), strict=True):
        rules.check_channel_name(where(0), field.name)
        if not (pa.types.is_floating(field.type) or pa.types.is_integer(field.type)):
            raise InputError(
                f"{where(0)}: field {quoted(f'rewards.{field.name}')} must be a number, column type "
                f"{quoted(field.type)}"
            )
        values = child.cast(pa.float64())
        ok = pc.and_(pc.is_finite(values), pc.less_equal(pc.abs(values), FLOAT32_MAX))
        present = values.is_valid()
        bad = pc.and_(present, pc.invert(ok.fill_null(True)))
        if pc.any(bad).as_py():
            raise InputError(
                f"{where(_first_bad(bad))}: field {quoted(f'rewards.{field.name}')} is NaN, infinite or "
                "past float32"
            )
        score_tables.append((field.name, values, present))
        any_score |= present.to_numpy(zero_copy_only=False)
    if not any_score.all():
        raise rules.must_be(where(_first_bad(pa.array(~any_score))), "rewards", " (this record has no score)")
    return score_tables


def _ids(
    batch: pa.RecordBatch, names: set[str], steps: np.ndarray, buffer: ChunkBuffer
) -> tuple[np.ndarray, np.ndarray]:
    """(rollout ids, group ids) of the batch's rows; new groups join the buffer's, in the order of their first
    row. The group keys (`records.group_key`) are built by Arrow and looked up once per distinct key, not
    once per row: a run of short rollouts paid a python call per rollout here."""
    n = batch.num_rows
    prompt = batch.column("prompt").cast(pa.string())
    by_prompt = pc.binary_join_element_wise(pa.array(steps).cast(pa.string()), "p", prompt, "\x1f")
    keys = by_prompt
    if "group" in names and not pa.types.is_null(batch.column("group").type):
        group = batch.column("group").cast(pa.string())
        steps_text = pa.array(steps).cast(pa.string())
        by_group = pc.binary_join_element_wise(steps_text, "g", group.fill_null(""), "\x1f")
        keys = pc.if_else(group.is_valid(), by_group, by_prompt)
    encoded = keys.dictionary_encode()  # distinct keys in the order of their first row
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    _, first_rows = np.unique(codes, return_index=True)  # (K,) first row of each distinct key, by code
    firsts = batch.take(pa.array(first_rows))
    gt = _ground_truths(firsts, names, len(first_rows))
    prompts = firsts.column("prompt").to_pylist()
    ids = [
        buffer.group_id(key, int(steps[row]), prompts[k], None if gt[k] is None else str(gt[k]))
        for k, (key, row) in enumerate(zip(encoded.dictionary.to_pylist(), first_rows.tolist(), strict=True))
    ]
    group_ids = np.asarray(ids, dtype=np.int64)[codes] if n else np.zeros(0, dtype=np.int64)
    start_id = buffer.next_rollout_id
    buffer.next_rollout_id += n
    return np.arange(start_id, start_id + n, dtype=np.int32), group_ids


def _optional_columns(batch: pa.RecordBatch, names: set[str], n_tokens: np.ndarray, where) -> dict:
    columns = {}
    if "prompt_ids" in names:
        columns["prompt_ids"] = _prompt_ids(batch.column("prompt_ids"), where)
    if "tokens" in names:
        columns["tokens"] = _labels(batch.column("tokens"), n_tokens, where)
    for name in rules.of_kind(rules.PER_TOKEN):
        if name in names:
            columns[name] = _check_float_lists(batch.column(name), n_tokens, name, where)
    if "meta" in names:
        columns["meta"] = _meta(batch.column("meta"), where)
    if "logged_advantage" in names:  # the trainer's advantage per rollout (the `logged` estimator)
        columns["logged_advantage"] = _logged_advantage(batch.column("logged_advantage"), where)
    return columns


def _prompt_ids(prompt_ids: pa.Array, where) -> pa.Array:
    if not (_is_list(prompt_ids.type) and pa.types.is_integer(prompt_ids.type.value_type)):
        raise rules.must_be(where(0), "prompt_ids", f", column type {quoted(prompt_ids.type)}")
    try:
        return prompt_ids.cast(pa.list_(pa.int32()))
    except pa.ArrowInvalid:
        raise InputError(f"{where(0)}: field 'prompt_ids' has ids that do not fit 32 bits") from None


def _labels(tokens: pa.Array, n_tokens: np.ndarray, where) -> pa.Array:
    value_type = tokens.type.value_type if _is_list(tokens.type) else None
    if value_type is None or not (pa.types.is_string(value_type) or pa.types.is_large_string(value_type)):
        raise rules.must_be(where(0), "tokens", f", column type {quoted(tokens.type)}")
    lengths = tokens.value_lengths().fill_null(-1).to_numpy(zero_copy_only=False)
    bad = (lengths >= 0) & (lengths != n_tokens)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise rules.length_mismatch(where(i), "tokens", lengths[i], "'token_ids'", n_tokens[i], why=False)
    return tokens.cast(pa.list_(pa.string()))


def _meta(meta: pa.Array, where) -> pa.Array:
    if not (pa.types.is_string(meta.type) or pa.types.is_large_string(meta.type)):
        texts = [json.dumps(m, default=str, ensure_ascii=False) for m in meta.to_pylist()]
        return pa.array(texts, pa.string())
    for i, text in enumerate(meta.to_pylist()):
        try:
            if text is not None:
                value = json.loads(text)
                if not isinstance(value, dict):
                    raise ValueError("not an object")
                json.dumps(value, ensure_ascii=False).encode("utf-8")  # no unpaired surrogates
        except (ValueError, RecursionError, UnicodeEncodeError):
            raise InputError(f"{where(i)}: field 'meta' must be a JSON object") from None
    return meta.cast(pa.string())


def _logged_advantage(logged: pa.Array, where) -> pa.Array:
    if not (
        pa.types.is_floating(logged.type) or pa.types.is_integer(logged.type) or pa.types.is_null(logged.type)
    ):
        column_type = quoted(logged.type)
        raise InputError(f"{where(0)}: field 'logged_advantage' must be a number, column type {column_type}")
    logged = logged.cast(pa.float64())
    bad = pc.invert(pc.is_finite(logged).fill_null(True))
    if pc.any(bad).as_py():
        raise InputError(f"{where(_first_bad(bad))}: field 'logged_advantage' must be a finite number")
    return logged


def _score_table(score_tables: list, rollout_ids: np.ndarray, run: int) -> pa.Table:
    ids, chans, vals = [], [], []
    for name, values, present in score_tables:
        keep = present.to_numpy(zero_copy_only=False)
        ids.append(rollout_ids[keep])
        chans.append(np.full(int(keep.sum()), name, dtype=object))
        vals.append(values.to_numpy(zero_copy_only=False)[keep])
    count = int(sum(len(x) for x in ids))
    return pa.table(
        {
            "run_id": pa.array(np.full(count, run, dtype=np.int32)),
            "rollout_id": pa.array(np.concatenate(ids) if ids else np.zeros(0, np.int32)),
            "channel": pa.array(np.concatenate(chans) if chans else [], pa.string()),
            "score": pa.array(np.concatenate(vals) if vals else np.zeros(0)),
        }
    )


def _feature(column: pa.Array, name: str, n_tokens: np.ndarray, where, rollout_ids: np.ndarray, run: int):
    """The long token_features table of a per-token feature column (rows where it is null have none)."""
    values = _check_float_lists(column, n_tokens, name, where)
    keep = values.is_valid().to_numpy(zero_copy_only=False)
    return pa.table(
        {
            "run_id": pa.array(np.full(int(keep.sum()), run, dtype=np.int32)),
            "rollout_id": pa.array(rollout_ids[keep]),
            "name": pa.array([name] * int(keep.sum()), pa.string()),
            "vals": values.filter(pa.array(keep)),
        }
    )


def _per_token_map(
    struct: pa.Array,
    column: str,
    n_tokens: np.ndarray,
    where,
    rollout_ids: np.ndarray,
    run: int,
    name_col: str,
    value_col: str,
) -> list[pa.Table]:
    """One long table per channel of a `token_rewards` or `extras` struct column."""
    parts = []
    for field, raw_child in zip(struct.type, struct.flatten(), strict=True):
        if column == "token_rewards":  # its keys are channels (extras' are feature names)
            rules.check_channel_name(where(0), field.name, "field 'token_rewards' names the channel")
        child = _check_float_lists(raw_child, n_tokens, f"{column}.{field.name}", where)
        keep = child.is_valid().to_numpy(zero_copy_only=False)
        parts.append(
            pa.table(
                {
                    "run_id": pa.array(np.full(int(keep.sum()), run, dtype=np.int32)),
                    "rollout_id": pa.array(rollout_ids[keep]),
                    name_col: pa.array([field.name] * int(keep.sum()), pa.string()),
                    value_col: child.filter(pa.array(keep)),
                }
            )
        )
    return parts
