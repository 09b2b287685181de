"""Readers of trainers' token-level dumps -> native records: NeMo-RL, prime-rl, RL Logging Board.

Each layout below was read from the project's own source (repository, path, commit):

- **nemo-rl**: NVIDIA-NeMo/RL `nemo_rl/algorithms/grpo.py` (the `log_data` block before
  `train_data_step{total_steps + 1}.jsonl`) and `nemo_rl/utils/logger.py` (`log_batched_dict_as_jsonl`),
  commit 7ea279abfbeb698b092856d0dab61e7cf39bc909. One line per sample, written as a batch of one:
  every field is the sample's row wrapped in a one-element list (`"rewards": [1.0]`,
  `"token_ids": [[...]]`), plus a bare `"idx"`. `token_ids`, `token_loss_mask`, `advantages`,
  `generation_logprobs`, `prev_logprobs` span the whole right-padded sequence (prompt, generated
  turns, environment turns); `input_lengths` is the unpadded length. Logprobs sit at the position of
  the token they score (position 0 holds 0). `token_loss_mask` is 1 on generated assistant tokens,
  `sample_loss_mask` 0 drops a whole sample. NeMo-RL groups by the prompt's token ids
  (`calculate_baseline_and_std_per_prompt(prompt_ids, ...)`), and so does this reader.
- **prime-rl**: PrimeIntellect-ai/prime-rl `src/prime_rl/trainer/rl/token_export.py`, commit
  559b44772e471d1538537b8805cc77f3824a5e64 (`--enable-token-export`):
  `<output_dir>/token_exports/step_<N>/rank_<R>.jsonl`, one line per packed sample with aligned
  per-token arrays (`token_ids`, `loss_mask`, `advantages`, `inference_logprobs`, `trainer_logprobs`
  shifted right so position t scores token t, `entropy`, importance-ratio diagnostics, optional
  component weights; non-finite floats become null) and a `STABLE` file once every rank has written
  the step. The export has no rewards and no example id: the sample's advantage (GRPO: reward minus
  the group mean, `src/prime_rl/orchestrator/algo/grpo.py`) becomes the score of channel `advantage`
  (group-relative estimators on it equal those on the unseen rewards: a per-group shift cancels),
  and groups are samples of one step with equal prompt token ids.
- **rl-logging-board**: HarderThenHarder/RLLoggingBoard `README.md` (section 2.1, the saved format)
  and `rl_logging_board.py` (`load_log_file`), commit cf56d5d97b293eddc75e6474e6607c9ccafc7fd5: every
  `*.jsonl` of a folder, one line per response: `prompt`, `response`, `response_tokens`
  (`tokenizer.convert_ids_to_tokens` strings), `logprobs`, `ref_logprobs`, `values`, `token_rewards`
  (KL penalty plus reward, as the trainer used them), `reward`, `step`, optional `ref_response`,
  `ref_reward`, `ground_truth`. Like the board, trailing `response_tokens` beyond the per-token lists
  (padding, clipped tokens) are cut.

Where each field goes (all per-token lists cover the response tokens only):
- prompt/response split: the response starts at the first token the trainer's loss mask keeps
  (NeMo-RL `token_loss_mask`, prime-rl `loss_mask`) and runs to the end of the sequence, so later
  masked tokens (environment or tool turns) stay in it as the record's `loss_mask` (1 trained; NeMo-RL's
  is `token_loss_mask * sample_loss_mask`) and `turns` (its runs; untrained ones `environment`).
- the trainer's per-token advantage: extras `logged_advantage` (and the rollout's when it is one number).
- trainer logprobs (NeMo-RL `prev_logprobs`, prime-rl `trainer_logprobs`, the board's `logprobs`)
  -> `logprobs`; the inference engine's (NeMo-RL `generation_logprobs`, prime-rl
  `inference_logprobs`) -> extras of those names; prime-rl `entropy` -> `entropies`; the board's
  `ref_logprobs`, `values` -> `ref_logprobs`, `values`; its `token_rewards` -> extras
  `logged_token_rewards` (not a reward channel: they already hold the KL penalty and the sequence
  reward, so as a channel both would count twice in the final credit).
- text: with `--model DIR` the prompt and response are decoded from the token ids and token labels
  follow `backend.ingest.tokenize.token_labels`. Without it, labels are `<id>`; NeMo-RL texts are its
  logged `content` messages (the first message as the prompt, the others as the response: the log
  does not say which messages are prompt), prime-rl texts (the trainer decodes nothing) are the labels.
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

from backend.core.errors import InputError
from backend.core.turns import spans_from_mask
from backend.ingest.records import check_text
from backend.ingest.sources import Progress, iter_jsonl
from backend.ingest.tokenize import Tokenizer

NEMO_RL_PATTERN = "train_data_step*.jsonl"
NEMO_RL_TOKEN_FIELDS = ("token_ids", "token_loss_mask", "advantages", "generation_logprobs", "prev_logprobs")
NEMO_RL_KNOWN = {*NEMO_RL_TOKEN_FIELDS, "input_lengths", "rewards", "sample_loss_mask", "content", "idx"}
PRIME_RL_SCALARS = (
    "schema_version",
    "step",
    "rank",
    "micro_step",
    "micro_sequence_idx",
    "export_sequence_idx",
    "env_name",
)
# prime-rl per-token columns stored as extras under their own names (bools as 0/1)
PRIME_RL_EXTRAS = (
    "inference_logprobs",
    "mismatch_kl",
    "log_importance_ratio",
    "importance_ratio",
    "prob_delta",
    "is_masked",
    "is_masked_high",
    "is_masked_low",
    "rl_weights",
    "ce_weights",
    "ref_kl_weights",
)
BOARD_PER_TOKEN = ("logprobs", "ref_logprobs", "values", "token_rewards")
BOARD_KNOWN = {"prompt", "response", "response_tokens", *BOARD_PER_TOKEN, "reward", "step", "ground_truth"}


# --- files of each layout ---------------------------------------------------------------------------


def _step_number(path: Path, pattern: str) -> int:
    found = re.search(pattern, path.name)
    return int(found.group(1)) if found else -1


def nemo_rl_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = [p for p in path.glob(NEMO_RL_PATTERN) if p.is_file()]
    return sorted(files, key=lambda p: (_step_number(p, r"train_data_step(\d+)"), p.name))


def _rank_files(step_dir: Path) -> list[Path]:
    files = [p for p in step_dir.glob("rank_*.jsonl") if p.is_file()]
    return sorted(files, key=lambda p: (_step_number(p, r"rank_(\d+)"), p.name))


def _prime_rl_steps(root: Path) -> tuple[list[Path], list[Path]]:
    """Step folders under `root` with rank files: (those with prime-rl's `STABLE` marker, the others)."""
    steps = sorted(
        (p for p in root.glob("step_*") if p.is_dir() and _rank_files(p)),
        key=lambda p: _step_number(p, r"step_(\d+)"),
    )
    stable = [p for p in steps if (p / "STABLE").exists()]
    return stable, [p for p in steps if p not in stable]


def holds_prime_rl_steps(path: Path) -> bool:
    """A folder of rank files, or whose `step_<N>` folders (or its `token_exports/`'s) have some."""
    root = path / "token_exports" if (path / "token_exports").is_dir() else path
    return bool(_rank_files(path)) or any(_rank_files(p) for p in root.glob("step_*") if p.is_dir())


def prime_rl_files(path: Path) -> list[Path]:
    """A rank file, a `step_<N>` folder, `token_exports/`, or the run's output folder. Of a folder of
    steps, only steps with prime-rl's `STABLE` marker are read while any has one (the others are
    still being written; the reader names them on stderr)."""
    if path.is_file():
        return [path]
    if _rank_files(path):
        return _rank_files(path)
    root = path / "token_exports" if (path / "token_exports").is_dir() else path
    stable, unstable = _prime_rl_steps(root)
    return [f for step in (stable or unstable) for f in _rank_files(step)]


def _note_unstable_steps(files: list[Path]) -> None:
    read = {f.parent for f in files}
    for root in sorted({f.parent.parent for f in files if f.parent.name.startswith("step_")}):
        skipped = [p.name for p in _prime_rl_steps(root)[1] if p not in read]
        if skipped:
            print(
                f"note: {root}: skipped {', '.join(skipped)} (no STABLE marker yet: prime-rl is still "
                "writing them)",
                file=sys.stderr,
            )


def rl_logging_board_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.glob("*.jsonl") if p.is_file())


# --- recognising a record ---------------------------------------------------------------------------


def record_format(obj: object) -> str | None:
    """Which token-dump format a parsed first record is written in, if any."""
    if not isinstance(obj, dict):
        return None
    if "token_loss_mask" in obj or ("input_lengths" in obj and "prev_logprobs" in obj):
        return "nemo-rl"
    if "schema_version" in obj and "trainer_logprobs" in obj and "loss_mask" in obj:
        return "prime-rl"
    board_keys = {"prompt", "response", "reward", "step"} <= obj.keys()
    if "rewards" not in obj and ("response_tokens" in obj or board_keys):  # native records have `rewards`
        return "rl-logging-board"
    return None


# --- shared helpers ---------------------------------------------------------------------------------


def _object(obj: object, where: str, fmt: str) -> dict:
    if not isinstance(obj, dict):
        raise InputError(f"{where}: a {fmt} record must be a JSON object, got {type(obj).__name__}")
    return obj


def _per_token(obj: dict, name: str, where: str, n: int | None = None) -> list:
    value = obj[name]
    if not isinstance(value, list):
        raise InputError(f"{where}: field {name!r} must be a list, got {type(value).__name__}")
    if n is not None and len(value) < n:
        raise InputError(f"{where}: field {name!r} has {len(value)} entries but the sequence has {n} tokens")
    return value


def _numbers(values: list, name: str, where: str) -> list[float]:
    """Floats of a per-token list; bools count as 0/1. A null or text entry is an error naming it."""
    out = []
    for k, x in enumerate(values):
        if isinstance(x, bool):
            x = float(x)
        if not isinstance(x, (int, float)):
            raise InputError(f"{where}: field {name!r}[{k}] must be a number, got {x!r:.40}")
        try:
            out.append(float(x))
        except OverflowError:
            raise InputError(f"{where}: field {name!r}[{k}] = {x!r:.40} is too large for a float") from None
    return out


def _labels_and_text(ids: list[int], tokenizer: Tokenizer) -> tuple[list[str], str]:
    labels = tokenizer.display(ids)
    if tokenizer.hf is None:
        return labels, "".join(labels)
    return labels, tokenizer.hf.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _prompt_group(prompt_ids: list[int]) -> str:
    digest = hashlib.blake2b(",".join(map(str, prompt_ids)).encode(), digest_size=8).hexdigest()
    return f"prompt ids {digest}"


def _one_advantage(advantages: list[float], mask: list[float]) -> float | None:
    """The advantage when it is one number over the trained tokens (GRPO), else None."""
    kept = {a for a, m in zip(advantages, mask, strict=True) if m}
    return kept.pop() if len(kept) == 1 else None


def _response_start(mask: list) -> int:
    """The first token the loss mask keeps; with none (an empty generation) the response is empty."""
    return next((k for k, m in enumerate(mask) if m), len(mask))


# --- NeMo-RL ----------------------------------------------------------------------------------------


def _unbatch(obj: dict, name: str, where: str):
    """NeMo-RL writes each sample as a batch of one: the sample's value is the only list element."""
    value = obj[name]
    if not isinstance(value, list) or len(value) != 1:
        raise InputError(
            f"{where}: field {name!r} must be a one-element list (NeMo-RL writes each "
            f"sample as a batch of one), got {str(value)[:40]}"
        )
    return value[0]


def nemo_rl_records(
    files: list[Path], progress: Progress | None, tokenizer: Tokenizer
) -> Iterator[tuple[str, dict]]:
    for path in files:
        step = max(_step_number(path, r"train_data_step(\d+)"), 0)
        for where, obj in iter_jsonl(path, progress):
            obj = _object(obj, where, "NeMo-RL")
            yield where, _nemo_rl_record(obj, step, where, tokenizer)


def _nemo_rl_record(obj: dict, step: int, where: str, tokenizer: Tokenizer) -> dict:
    """One NeMo-RL sample -> a native record: the loss mask's first kept token starts the response."""
    _require_nemo_rl_fields(obj, where)
    length = _unbatch(obj, "input_lengths", where)
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise InputError(f"{where}: field 'input_lengths' must hold a non-negative integer")
    rows = _nemo_rl_token_rows(obj, length, where)
    ids = rows["token_ids"]
    sample_mask = _unbatch(obj, "sample_loss_mask", where) if "sample_loss_mask" in obj else 1.0
    sample_mask = _numbers([sample_mask], "sample_loss_mask", where)[0]
    token_mask = _numbers(rows["token_loss_mask"], "token_loss_mask", where)
    start = _response_start(token_mask)
    prompt_ids, response_ids = ids[:start], ids[start:]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InputError(f"{where}: field 'token_ids' must hold integers")
    extras = {}
    rec: dict = {
        "step": step,
        "group": _prompt_group(prompt_ids),
        "prompt_ids": prompt_ids,
        "token_ids": response_ids,
        "rewards": {"task": _unbatch(obj, "rewards", where)},
        "loss_mask": [int(m * sample_mask > 0) for m in token_mask[start:]],
        "turns": spans_from_mask([int(m > 0) for m in token_mask[start:]], "environment"),  # env turns
    }
    if "prev_logprobs" in rows:
        rec["logprobs"] = _numbers(rows["prev_logprobs"], "prev_logprobs", where)[start:]
    if "generation_logprobs" in rows:
        generation = _numbers(rows["generation_logprobs"], "generation_logprobs", where)
        extras["generation_logprobs"] = generation[start:]
    if "advantages" in rows:
        advantages = _numbers(rows["advantages"], "advantages", where)[start:]
        extras["logged_advantage"] = advantages
        rec["logged_advantage"] = _one_advantage(advantages, token_mask[start:])
    rec["extras"] = extras
    labels, response = _labels_and_text(response_ids, tokenizer)
    rec["tokens"] = labels
    rec["prompt"], rec["response"] = _nemo_rl_texts(obj, prompt_ids, response, tokenizer, where)
    rec["meta"] = _nemo_rl_meta(obj, sample_mask, length)
    return rec


_TEXT_ONLY_HINT = (
    " (a text-only dump, as older NeMo-RL versions wrote them; this reader needs the token ids current "
    "NeMo-RL logs)"
)


def _require_nemo_rl_fields(obj: dict, where: str) -> None:
    for name in ("token_ids", "token_loss_mask", "input_lengths", "rewards"):
        if name not in obj:
            hint = _TEXT_ONLY_HINT if name == "token_ids" and "content" in obj else ""
            raise InputError(f"{where}: missing NeMo-RL field {name!r}{hint}")


def _nemo_rl_token_rows(obj: dict, length: int, where: str) -> dict[str, list]:
    """The per-token fields the sample has, each cut to its `input_lengths` tokens (prompt and response)."""
    rows = {}
    for name in NEMO_RL_TOKEN_FIELDS:
        if name in obj:
            row = _unbatch(obj, name, where)
            if not isinstance(row, list) or len(row) < length:
                got = len(row) if isinstance(row, list) else repr(row)[:40]
                raise InputError(
                    f"{where}: field {name!r} must list at least input_lengths = {length} values, got {got}"
                )
            rows[name] = row[:length]
    return rows


def _nemo_rl_texts(
    obj: dict, prompt_ids: list[int], response: str, tokenizer: Tokenizer, where: str
) -> tuple[str, str]:
    """Prompt and response text: decoded by the tokenizer when it is a real one, else the sample's
    `content` messages (the first the prompt, the rest the response)."""
    if tokenizer.hf is not None:
        return _labels_and_text(prompt_ids, tokenizer)[1], response
    content = _unbatch(obj, "content", where) if "content" in obj else []
    if not isinstance(content, list):
        raise InputError(f"{where}: field 'content' must hold the list of message texts")
    messages = [m if isinstance(m, str) else str(m) for m in content]
    return (messages[0] if messages else ""), ("".join(messages[1:]) if len(messages) > 1 else response)


def _nemo_rl_meta(obj: dict, sample_mask: float, length: int) -> dict:
    """idx, the sample's loss mask and length, and every field the reader does not use (unbatched)."""
    meta = {"idx": obj.get("idx"), "sample_loss_mask": sample_mask, "input_length": length}
    for key, value in obj.items():
        if key not in NEMO_RL_KNOWN:
            one = isinstance(value, list) and len(value) == 1
            meta[key] = value[0] if one else value
    return meta


# --- prime-rl ---------------------------------------------------------------------------------------


def prime_rl_records(
    files: list[Path], progress: Progress | None, tokenizer: Tokenizer
) -> Iterator[tuple[str, dict]]:
    _note_unstable_steps(files)
    for path in files:
        for where, obj in iter_jsonl(path, progress):
            obj = _object(obj, where, "prime-rl")
            for name in ("token_ids", "loss_mask", "advantages", "step"):
                if name not in obj:
                    raise InputError(f"{where}: missing prime-rl token export field {name!r}")
            ids = _per_token(obj, "token_ids", where)
            n = len(ids)
            mask = _numbers(_per_token(obj, "loss_mask", where, n), "loss_mask", where)[:n]
            start = _response_start(mask)
            prompt_ids, response_ids = ids[:start], ids[start:]
            loss_mask = [int(m > 0) for m in mask[start:]]
            advantages = _numbers(_per_token(obj, "advantages", where, n)[:n], "advantages", where)[start:]
            trained = [a for a, m in zip(advantages, loss_mask, strict=True) if m] or [0.0]
            step = obj["step"]
            rec: dict = {
                "step": step,
                "prompt_ids": prompt_ids,
                "token_ids": response_ids,
                "group": _prompt_group(prompt_ids),
                "rewards": {"advantage": math.fsum(trained) / len(trained)},
                "logged_advantage": _one_advantage(advantages, loss_mask),
                "loss_mask": loss_mask,
                "turns": spans_from_mask(loss_mask, "environment"),
            }
            extras = {"logged_advantage": advantages}
            dropped = []
            for name, target in (("trainer_logprobs", "logprobs"), ("entropy", "entropies")):
                if obj.get(name) is not None:
                    values = _per_token(obj, name, where, n)[start:n]
                    if any(v is None for v in values):
                        dropped.append(name)  # prime-rl writes null for a non-finite value
                    else:
                        rec[target] = _numbers(values, name, where)
            for name in PRIME_RL_EXTRAS:
                values = obj.get(name)
                if values is None:
                    continue
                values = _per_token(obj, name, where, n)[start:n]
                if all(v is None for v in values):
                    continue  # not computed for this batch (e.g. no DPPO masking, default weights)
                if any(v is None for v in values):
                    dropped.append(name)
                    continue
                extras[name] = _numbers(values, name, where)
            rec["extras"] = extras
            labels, response = _labels_and_text(response_ids, tokenizer)
            rec["tokens"], rec["response"] = labels, response
            rec["prompt"] = _labels_and_text(prompt_ids, tokenizer)[1]
            rec["meta"] = {key: obj.get(key) for key in PRIME_RL_SCALARS if key in obj}
            if dropped:
                rec["meta"]["fields_with_nulls_left_out"] = dropped
            yield where, rec


# --- RL Logging Board -------------------------------------------------------------------------------


def _board_step(value: object, where: str) -> int:
    """The board reads `int(data['step'])`: integers, integral floats and digit strings."""
    if isinstance(value, bool):
        raise InputError(f"{where}: field 'step' must be an integer, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, int):
        return value
    raise InputError(f"{where}: field 'step' must be an integer, got {value!r:.40}")


def _board_ids(tokens: list[str], tokenizer: Tokenizer, where: str) -> list[int]:
    """`response_tokens` are `convert_ids_to_tokens` strings: the run's tokenizer maps them back;
    without one, ids are `crc32(token) & 0x7fffffff` (equal strings, equal ids), as in simple
    tokenization."""
    if tokenizer.hf is None:
        return [zlib.crc32(t.encode("utf-8")) & 0x7FFFFFFF for t in tokens]
    ids = tokenizer.hf.convert_tokens_to_ids(tokens)
    unk = tokenizer.hf.unk_token_id
    for k, (token, token_id) in enumerate(zip(tokens, ids, strict=True)):
        if token_id is None or (token_id == unk and token != tokenizer.hf.unk_token):
            raise InputError(
                f"{where}: field 'response_tokens'[{k}] = {token!r:.40} is not in the "
                f"vocabulary of {tokenizer.model_dir}; pass the run's own model folder, or none"
            )
    return ids


def rl_logging_board_records(
    files: list[Path], progress: Progress | None, tokenizer: Tokenizer
) -> Iterator[tuple[str, dict]]:
    for path in files:
        for where, obj in iter_jsonl(path, progress):
            obj = _object(obj, where, "RL Logging Board")
            for name in ("prompt", "response", "reward", "step"):
                if name not in obj:
                    raise InputError(f"{where}: missing RL Logging Board field {name!r}")
            lengths = {
                name: len(_per_token(obj, name, where))
                for name in BOARD_PER_TOKEN
                if obj.get(name) is not None
            }
            if len(set(lengths.values())) > 1:
                raise InputError(
                    f"{where}: per-token fields disagree in length "
                    f"({', '.join(f'{k} {v}' for k, v in lengths.items())})"
                )
            rec: dict = {
                "prompt": obj["prompt"],
                "response": obj["response"],
                "step": _board_step(obj["step"], where),
                "rewards": {"task": obj["reward"]},
                "ground_truth": obj.get("ground_truth"),
            }
            meta: dict = {key: value for key, value in obj.items() if key not in BOARD_KNOWN}
            tokens = obj.get("response_tokens")
            if tokens is not None:
                if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
                    raise InputError(f"{where}: field 'response_tokens' must be a list of strings")
                for token in tokens:
                    check_text(token, where, "response_tokens")
                n = next(iter(lengths.values()), len(tokens))
                if len(tokens) < n:
                    raise InputError(
                        f"{where}: field 'response_tokens' has {len(tokens)} entries but the "
                        f"per-token fields have {n}"
                    )
                if len(tokens) > n:  # the board cuts these too (padding, clipped tokens)
                    meta["response_tokens_cut"] = tokens[n:]
                tokens = tokens[:n]
                rec["token_ids"] = _board_ids(tokens, tokenizer, where)
                rec["tokens"] = tokenizer.display(rec["token_ids"]) if tokenizer.hf is not None else tokens
            for name in ("logprobs", "ref_logprobs", "values"):
                if obj.get(name) is not None:
                    rec[name] = obj[name]
            if obj.get("token_rewards") is not None:
                rec["extras"] = {"logged_token_rewards": obj["token_rewards"]}
            rec["meta"] = meta
            yield where, rec
