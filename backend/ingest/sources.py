"""Readers: each yields native records `(where, dict)` from a file, streaming.

- native JSONL / Parquet (DESIGN.md's format; Parquet with `token_ids` also has a vectorized fast path
  in `backend.ingest.fast_parquet`)
- verl `rollout_data_dir` dumps: `<step>.jsonl` with input, output, gts, score, step, extra keys
- TRL `completions/completions_*.parquet`: step, prompt, completion, one column per reward function,
  any `log_extra` columns, advantage
Every record a reader yields carries a `record_key` (see `record_key`): imports skip keys the run has.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from backend.errors import InputError
from backend.ingest.canonical import record_key_of_text

Progress = Callable[[int], None]  # called with bytes (or rows) consumed since the last call
TEXT_FORMATS = ("native", "verl", "trl")
"""Formats read here (the token-level dumps of other trainers are `token_dumps.READERS`)."""


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


def record_key(name: str, index: int, content: object) -> int:
    """A record's identity for idempotent imports: (file name, position in the file, content) as a
    signed 64-bit hash. The file name, not its path: the same file reached through a directory, a
    subdirectory or directly gives the same key; a grown file keeps its earlier records' keys."""
    text = content if isinstance(content, str) else json.dumps(content, sort_keys=True, ensure_ascii=False,
                                                               default=str)
    return record_key_of_text(name, index, text)


@dataclass
class ReadNotes:
    """What the readers tell the import summary: lines (deduplicated, in order) and counts."""

    lines: dict[str, None] = field(default_factory=dict)
    unscorable: int = 0
    channels: dict[str, None] = field(default_factory=dict)
    """The channels the reader made (a column that is all NaN in a file still names its channel)."""

    def add(self, line: str) -> None:
        self.lines[line] = None


def _plain(value: object) -> object:
    """A JSON-able python value: NaN/inf floats become None (JSON has none), numpy scalars python."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _channel_list(channels: list[str] | None, have: list[str], where: str) -> list[str] | None:
    if channels is None:
        return None
    missing = [c for c in channels if c not in have]
    if missing:
        raise InputError(f"{where}: --channels names {', '.join(missing)}, not in the file; it has "
                         f"{', '.join(have)}")
    return channels


VERL_RESERVED = {"input", "output", "gts", "score", "step"}
VERL_KEY_FORMAT = re.compile(r"^(?P<prompt>.+)_(?P<session>\d+)_(?P<index>\d+)$")


def verl_group(uid: object) -> object:
    """verl's v1 trainer dumps `uid` as its TransferQueue key `{prompt uid}_{session}_{index}`
    (verl/trainer/ppo/v1/agent_loop_tq.py): the prompt uid is the group. Other uids are the group."""
    if isinstance(uid, str):
        match = VERL_KEY_FORMAT.match(uid)
        return match.group("prompt") if match else uid
    return uid if isinstance(uid, int) and not isinstance(uid, bool) else None


def verl_records(files: list[Path], progress: Progress | None = None, notes: ReadNotes | None = None,
                 channels: list[str] | None = None) -> Iterator[tuple[str, dict]]:
    """verl dump lines -> native records.

    `score` is the reward verl trains on (the legacy trainer dumps `token_level_scores.sum(-1)`) and becomes
    the `task` channel. The other numeric keys are verl's `reward_extra_info`: every key of the dict a
    reward function returns beside `score` (`NaiveRewardManager.__call__` in
    `verl/workers/reward_manager/naive.py` appends each to `reward_extra_info[key]`; `dapo.py` adds
    `acc = reward > 0` for a plain score), dumped by `_write_generations` as extra keys. They describe a
    rollout, they are not rewards, so they become per-rollout metrics (booleans as 1/0), never channels;
    `channels` promotes chosen keys to channels (`score` among them names the task channel). Other keys
    (uid, request_id, strings, lists) -> meta. Groups: by `uid` when present (v1 trainer), else by prompt
    text and step."""
    notes = notes if notes is not None else ReadNotes()
    for path in files:
        step_from_name = re.findall(r"\d+", path.stem)
        for index, (where, obj) in enumerate(iter_jsonl(path, progress)):
            if not isinstance(obj, dict):
                raise InputError(f"{where}: a record must be a JSON object")
            for name in ("input", "output", "score"):
                if name not in obj:
                    raise InputError(f"{where}: missing required verl field {name!r}")
            chosen = _channel_list(channels, list(obj), where)
            step = obj.get("step", int(step_from_name[-1]) if step_from_name else 0)
            rewards: dict = {}
            metrics: dict = {}
            meta: dict = {}
            as_channels, as_metrics, as_meta = [], [], []
            for key, value in obj.items():
                if key in VERL_RESERVED and key != "score":
                    continue
                is_number = isinstance(value, (int, float))  # bools count: verl logs acc as true/false
                if (key in chosen) if chosen is not None else key == "score":
                    if value is None:
                        continue  # no score on this channel: never a silent 0
                    if not is_number:
                        raise InputError(f"{where}: field {key!r} must be a number to be a channel, got "
                                         f"{value!r:.40}")
                    # huge ints stay ints so the validator reports them (float() would overflow here)
                    rewards["task" if key == "score" else key] = value if type(value) is int else float(value)
                    as_channels.append(key)
                elif is_number:
                    if math.isfinite(value) if isinstance(value, float) else True:
                        metrics[key] = value  # a NaN metric (json.dumps writes NaN) is no value
                    as_metrics.append(key)
                elif key != "score":
                    meta[key] = value
                    as_meta.append(key)
            if not rewards:
                notes.unscorable += 1
            declared = chosen if chosen is not None else ["score"]  # a null score still names its channel
            notes.channels.update(dict.fromkeys("task" if c == "score" else c for c in declared))
            notes.add(f"channels: {', '.join(('score -> task' if c == 'score' else c) for c in as_channels)}"
                      + (f"; metrics (per rollout, not rewards): {', '.join(as_metrics)}"
                         if as_metrics else "")
                      + (f"; kept in meta: {', '.join(as_meta)}" if as_meta else ""))
            group = verl_group(obj["uid"]) if "uid" in obj else None
            notes.add("groups: by uid (verl v1 trainer)" if group is not None
                      else "groups: by prompt text and step (no uid in the dump)")
            gts = obj.get("gts")
            yield (
                where,
                {
                    "prompt": obj["input"],
                    "response": obj["output"],
                    "step": step,
                    "group": group,
                    "rewards": rewards,
                    "metrics": metrics,
                    "meta": meta,
                    "ground_truth": None
                    if gts is None
                    else (gts if isinstance(gts, str) else json.dumps(gts, ensure_ascii=False)),
                    "record_key": record_key(path.name, index, obj),
                },
            )


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
    return "".join(f"{m.get('role', '?')}: {_content_text(m.get('content'))}\n" for m in messages)


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: their text
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return "" if content is None else json.dumps(content, ensure_ascii=False, default=str)


def _is_messages(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value)


def _runs(prompt_keys: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Start index of each run of equal consecutive (step, prompt) rows: (R,) int64."""
    n = len(prompt_keys)
    change = np.ones(n, dtype=bool)
    change[1:] = (prompt_keys[1:] != prompt_keys[:-1]) | (steps[1:] != steps[:-1])
    return np.flatnonzero(change)


def trl_blocks(prompt_keys: np.ndarray, steps: np.ndarray, size: int | None, path: Path,
               stated: bool) -> np.ndarray:
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
                    raise InputError(f"{path}: record {a + 1}: its step has {b - a} rows, not a multiple of "
                                     f"--group-size {size}")
            starts = step_starts
        else:
            starts = _runs(prompt_keys, steps)
        bounds = np.r_[starts, n]
        starts = np.concatenate([np.arange(a, b, size) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
                                or [np.zeros(0, np.int64)])
    group = np.zeros(n, dtype=bool)
    group[starts] = True
    return np.cumsum(group) - 1


def _prompt_keys(path: Path, has_step: bool) -> tuple[np.ndarray, np.ndarray]:
    """(N,) int64 hashes of the prompts (text or messages) and of the steps of a TRL table."""
    try:
        head = pq.read_table(path, columns=["prompt", *(["step"] if has_step else [])])
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{path}: damaged Parquet data ({str(exc).splitlines()[0]})") from None
    keys = np.fromiter(
        (hash(p if isinstance(p, str) else json.dumps(p, sort_keys=True, default=str))
         for p in head.column("prompt").to_pylist()),
        dtype=np.int64, count=head.num_rows,
    )
    # Steps only need comparing here; the record validator names a step that is not an integer.
    steps = (np.fromiter((hash(repr(s)) for s in head.column("step").to_pylist()), dtype=np.int64,
                         count=head.num_rows)
             if has_step else np.zeros(head.num_rows, dtype=np.int64))
    return keys, steps


def trl_records(files: list[Path], progress: Progress | None = None, notes: ReadNotes | None = None,
                channels: list[str] | None = None, group_size: int | None = None,
                tokenizer=None) -> Iterator[tuple[str, dict]]:
    """TRL completion logs -> native records.

    Channels: the float columns (TRL's reward functions), or `channels`; one channel is named `task`.
    NaN (a reward function returned None) is a missing score; a row with none is unscorable. Other
    numeric columns (`log_extra` numbers, float columns `channels` leaves out) are per-rollout metrics;
    the rest (strings, lists) go to meta per rollout. Conversational rows keep their
    messages in meta; the response is the assistant content, the prompt the rendered messages.
    """
    notes = notes if notes is not None else ReadNotes()
    # First pass, prompts only: the run sizes of every file give the common group size.
    schemas, prompt_keys = {}, {}
    for path in files:
        try:
            schemas[path] = pq.read_schema(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"{path}: not a readable Parquet file ({exc})") from None
        for name in ("prompt", "completion"):
            if name not in schemas[path].names:
                raise InputError(f"{path}: missing required TRL column {name!r}")
        prompt_keys[path] = _prompt_keys(path, "step" in schemas[path].names)
    sizes = np.concatenate([np.diff(np.r_[_runs(*k), len(k[0])]) for k in prompt_keys.values()]
                           or [np.zeros(0, np.int64)])
    common = group_size or (int(sizes.min()) if len(sizes) else 1)
    split = group_size is None and bool(len(sizes)) and bool((sizes % common == 0).all())
    n_split = int((sizes > common).sum()) if split else 0
    if group_size is not None:
        notes.add(f"groups: blocks of {group_size} consecutive rows (--group-size)")
    elif n_split:
        notes.add(f"groups: {n_split} prompt-text group(s) of a multiple of {common} rows split into blocks "
                  f"of {common} (TRL's num_generations; state it with --group-size)")
    else:
        notes.add("groups: consecutive rows with the same prompt text")
    for path in files:
        schema = schemas[path]
        blocks = trl_blocks(*prompt_keys.pop(path), common if (split or group_size) else None, path,
                            stated=group_size is not None)
        candidates = [f.name for f in schema if f.name not in TRL_RESERVED]
        if channels is not None:
            reward_cols = _channel_list(channels, candidates, str(path))
            for col in reward_cols:
                t = schema.field(col).type
                if not _is_numeric(t):
                    raise InputError(f"{path}: --channels column {col!r} is {t}, not numeric")
        else:
            reward_cols = [c for c in candidates if pa.types.is_floating(schema.field(c).type)]
        if not reward_cols:
            raise InputError(f"{path}: no reward columns (float columns besides advantage); name them "
                             "with --channels")
        others = [c for c in candidates if c not in reward_cols]
        metric_cols = [c for c in others if _is_numeric(schema.field(c).type)]
        meta_cols = [c for c in others if c not in metric_cols]
        names = {reward_cols[0]: "task"} if len(reward_cols) == 1 else {c: c for c in reward_cols}
        notes.channels.update(dict.fromkeys(names.values()))
        notes.add("channels: " + ", ".join(f"{c} -> {ch}" if c != ch else c for c, ch in names.items())
                  + (f"; metrics (per rollout, not rewards): {', '.join(metric_cols)}" if metric_cols else "")
                  + (f"; kept in meta: {', '.join(meta_cols)}" if meta_cols else ""))
        for index, (where, row) in enumerate(iter_parquet_rows(path, progress)):
            rewards = {}
            for col, channel in names.items():
                value = row.get(col)
                if value is None or (isinstance(value, float) and math.isnan(value)):
                    continue  # TRL logs NaN where a reward function returned None: no score there
                rewards[channel] = float(value)
            if not rewards:
                notes.unscorable += 1
            metrics = {c: row.get(c) for c in metric_cols}  # NaN (a null log_extra value): no value
            metrics = {c: v for c, v in metrics.items() if not (isinstance(v, float) and math.isnan(v))}
            meta = {c: _plain(row.get(c)) for c in meta_cols}
            prompt, completion = row["prompt"], row["completion"]
            if _is_messages(prompt):
                meta["prompt_messages"] = _plain(prompt)
                prompt = render_messages(prompt, tokenizer)
            elif not isinstance(prompt, str):
                raise InputError(f"{where}: field 'prompt' must be text or a list of {{role, content}} "
                                 f"messages, got {type(prompt).__name__}")
            if _is_messages(completion):
                meta["completion_messages"] = _plain(completion)
                completion = "".join(_content_text(m.get("content")) for m in completion
                                     if m.get("role") == "assistant")
            elif not isinstance(completion, str):
                raise InputError(f"{where}: field 'completion' must be text or a list of {{role, content}} "
                                 f"messages, got {type(completion).__name__}")
            adv = row.get("advantage")
            if isinstance(adv, float) and math.isnan(adv):
                adv = None
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
    raise InputError(f"{path}: unknown format; pass --format (`creditlens import --help` lists them)")
