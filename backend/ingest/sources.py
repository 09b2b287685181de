"""Readers: each yields native records `(where, dict)` from a file, streaming.

- native JSONL / Parquet (DESIGN.md's format; Parquet with `token_ids` also has a vectorized fast path
  in `backend.ingest.fast_parquet`)
- verl `rollout_data_dir` dumps: `<step>.jsonl` with input, output, gts, score, step, extra keys
- TRL `completions/completions_*.parquet`: step, prompt, completion, one column per reward function,
  advantage
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from backend.errors import InputError

Progress = Callable[[int], None]  # called with bytes (or rows) consumed since the last call
FORMATS = ("native", "verl", "trl", "nemo-rl", "prime-rl", "rl-logging-board")  # readers: token_dumps


def iter_jsonl(path: Path, progress: Progress | None = None) -> Iterator[tuple[str, object]]:
    """Yield `(where, parsed)` per non-empty line. NaN/Infinity literals parse to floats so that the
    record validator can name the field that holds them."""
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if progress:
                progress(len(raw))
            where = f"{path}: line {lineno}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{where}: not valid UTF-8 (byte {exc.start})") from None
            if not text.strip():
                continue
            try:
                yield where, json.loads(text)
            except (json.JSONDecodeError, ValueError) as exc:
                raise InputError(f"{where}: malformed JSON ({str(exc).splitlines()[0]})") from None
            except RecursionError:
                raise InputError(f"{where}: malformed JSON (nested too deeply)") from None


def iter_parquet_rows(
    path: Path, progress: Progress | None = None, batch_size: int = 2048
) -> Iterator[tuple[str, dict]]:
    try:
        reader = pq.ParquetFile(path, pre_buffer=False)  # bounded memory: see __init__
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from None
    offset = 0
    for batch in read_batches(reader, path, batch_size):
        for k, row in enumerate(batch.to_pylist()):
            yield f"{path}: record {offset + k + 1}", row
        offset += batch.num_rows
        if progress:
            progress(batch.num_rows)


def read_batches(reader: pq.ParquetFile, path: Path, batch_size: int) -> Iterator[pa.RecordBatch]:
    """Record batches of a Parquet file; a file whose footer reads but whose pages are damaged (or
    whose strings are not UTF-8) fails here, mid-file, and becomes an `InputError` naming it."""
    batches = reader.iter_batches(batch_size=batch_size)
    offset = 0
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
            raise InputError(
                f"{path}: record {offset + 1} onwards: damaged Parquet data ({str(exc).splitlines()[0]})"
            ) from None
        offset += batch.num_rows
        yield batch


def _sorted_step_files(directory: Path, pattern: str) -> list[Path]:
    files = [p for p in directory.glob(pattern) if p.is_file()]

    def key(p: Path):
        digits = re.findall(r"\d+", p.stem)
        return (int(digits[-1]) if digits else -1, p.name)

    return sorted(files, key=key)


def verl_files(path: Path) -> list[Path]:
    return [path] if path.is_file() else _sorted_step_files(path, "*.jsonl")


def trl_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    found = _sorted_step_files(path, "completions_*.parquet") or _sorted_step_files(
        path / "completions", "completions_*.parquet"
    )
    return found


VERL_RESERVED = {"input", "output", "gts", "score", "step"}


def verl_records(files: list[Path], progress: Progress | None = None) -> Iterator[tuple[str, dict]]:
    """verl dump lines -> native records: score -> `task`, extra numeric keys -> channels of their names."""
    for path in files:
        step_from_name = re.findall(r"\d+", path.stem)
        for where, obj in iter_jsonl(path, progress):
            if not isinstance(obj, dict):
                raise InputError(f"{where}: a record must be a JSON object")
            for name in ("input", "output", "score"):
                if name not in obj:
                    raise InputError(f"{where}: missing required verl field {name!r}")
            step = obj.get("step", int(step_from_name[-1]) if step_from_name else 0)
            score = obj["score"]
            if isinstance(score, bool):
                score = float(score)
            rewards = {"task": score}
            meta = {}
            for key, value in obj.items():
                if key in VERL_RESERVED:
                    continue
                if isinstance(value, (int, float)):  # bools count: verl logs acc as true/false
                    # huge ints stay ints so the validator reports them (float() would overflow here)
                    rewards[key] = value if type(value) is int else float(value)
                else:
                    meta[key] = value
            gts = obj.get("gts")
            yield (
                where,
                {
                    "prompt": obj["input"],
                    "response": obj["output"],
                    "step": step,
                    "rewards": rewards,
                    "meta": meta,
                    "ground_truth": None
                    if gts is None
                    else (gts if isinstance(gts, str) else json.dumps(gts)),
                },
            )


TRL_RESERVED = {"step", "prompt", "completion", "advantage", "image", "images"}


def trl_records(files: list[Path], progress: Progress | None = None) -> Iterator[tuple[str, dict]]:
    """TRL completion logs -> native records: each reward column a channel (`task` if only one)."""
    for path in files:
        try:
            schema = pq.read_schema(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"{path}: not a readable Parquet file ({exc})") from None
        for name in ("prompt", "completion"):
            if name not in schema.names:
                raise InputError(f"{path}: missing required TRL column {name!r}")
        reward_cols = [
            f.name
            for f in schema
            if f.name not in TRL_RESERVED
            and (pa.types.is_floating(f.type) or pa.types.is_integer(f.type) or pa.types.is_boolean(f.type))
        ]
        if not reward_cols:
            raise InputError(f"{path}: no reward columns (numeric columns besides step and advantage)")
        names = {reward_cols[0]: "task"} if len(reward_cols) == 1 else {c: c for c in reward_cols}
        for where, row in iter_parquet_rows(path, progress):
            rewards = {}
            for col, channel in names.items():
                value = row.get(col)
                if value is None or (isinstance(value, float) and math.isnan(value)):
                    # TRL logs NaN where a reward function does not apply to a sample: skip that channel.
                    continue
                rewards[channel] = float(value)
            if not rewards:
                raise InputError(f"{where}: every reward column is empty or NaN ({', '.join(reward_cols)})")
            prompt = row["prompt"]
            if not isinstance(prompt, str):
                prompt = json.dumps(prompt, default=str)
            completion = row["completion"]
            if not isinstance(completion, str):
                completion = json.dumps(completion, default=str)
            adv = row.get("advantage")
            step = row.get("step") or 0
            if isinstance(step, float) and step.is_integer():
                step = int(step)
            yield (
                where,
                {
                    "prompt": prompt,
                    "response": completion,
                    "step": step,  # the validator names a step that is not a non-negative integer
                    "rewards": rewards,
                    "logged_advantage": adv,
                    "meta": {"reward_columns": reward_cols},
                },
            )


def detect_format(path: Path) -> str:
    """native | verl | trl, from the file names and the first record's fields."""
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    if path.is_dir():
        if trl_files(path):
            return "trl"
        if _sorted_step_files(path, "*.jsonl"):
            return "verl"
        raise InputError(
            f"{path}: a directory with no files of a known format (<step>.jsonl, completions_*.parquet, "
            "train_data_step<N>.jsonl, token_exports/); pass --format or a file"
        )
    if path.suffix == ".parquet":
        try:
            names = pq.read_schema(path).names
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"{path}: not a readable Parquet file ({exc})") from None
        if "completion" in names:
            return "trl"
        if "response" in names:
            return "native"
        raise InputError(f"{path}: unknown Parquet layout (columns {names[:8]}); expected native or TRL")
    try:
        for _where, obj in iter_jsonl(path):
            if isinstance(obj, dict) and "input" in obj and "output" in obj:
                return "verl"
            if isinstance(obj, dict) and "response" in obj:
                return "native"
            break
    except InputError:
        pass  # the importer will report the malformed line with its number
    if path.suffix in (".jsonl", ".json"):
        return "native"
    raise InputError(f"{path}: unknown format; pass --format {'|'.join(FORMATS)}")
