"""Runs of about N response tokens in every import format, written as each trainer writes them (the files
of `python -m bench ingest`'s formats table): ragged responses (128 to 895 tokens), groups of 8, 64 groups
a step. The source lines each layout follows are cited in `tests/backend/ingest/test_token_formats.py`,
`tests/backend/ingest/verl_dumps.py` and `backend/ingest/token_dumps.py`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def _responses(total_tokens: int, seed: int, group: int = 8, mean_len: int = 512):
    """(rollout, step, group key, response length) of a run of about `total_tokens` response tokens."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(
        mean_len // 4, mean_len * 7 // 4, size=group * -(-total_tokens // (mean_len * group))
    )
    for i, n in enumerate(lengths.tolist()):
        yield i, i // (group * 64), i // group, n, rng


def _floats(rng, n: int) -> list[float]:
    """Log-probabilities as a trainer logs them: float32 values written as python floats."""
    return (-rng.exponential(1.0, size=n).astype(np.float32)).tolist()


def write_native(folder: Path, total_tokens: int, seed: int = 0) -> tuple[Path, Path]:
    """The same native run as JSONL (`json.dumps` per record) and as Parquet."""
    records = []
    for _, step, group, n, rng in _responses(total_tokens, seed):
        records.append(
            {
                "prompt": f"prompt {group}",
                "response": "...",
                "step": step,
                "token_ids": rng.integers(0, 50_000, size=n).tolist(),
                "logprobs": _floats(rng, n),
                "entropies": (rng.exponential(1.0, size=n).astype(np.float32)).tolist(),
                "rewards": {"task": float(rng.integers(0, 2)), "style": -float(rng.integers(0, 2))},
            }
        )
    jsonl, parquet = folder / "native.jsonl", folder / "native.parquet"
    with open(jsonl, "w") as out:
        for record in records:
            out.write(json.dumps(record) + "\n")
    table = pa.Table.from_pylist(records)
    for name in ("logprobs", "entropies"):
        table = table.set_column(
            table.schema.get_field_index(name), name, table.column(name).cast(pa.list_(pa.float32()))
        )
    pq.write_table(table, parquet)
    return jsonl, parquet


def write_nemo_rl(folder: Path, total_tokens: int, seed: int = 1) -> Path:
    """`train_data_step{N}.jsonl`: every field a batch of one, the sequence right-padded to a multiple of 8
    (`tests/backend/ingest/test_token_formats.py` has the source lines)."""
    folder.mkdir()
    files: dict[int, list[str]] = {}
    for _, step, group, n, rng in _responses(total_tokens, seed):
        prompt = (np.arange(24) + group).tolist()
        width = -(-(24 + n) // 8) * 8
        pad = width - 24 - n
        ids = prompt + rng.integers(0, 50_000, size=n).tolist() + [0] * pad
        mask = [0] * 24 + [1] * n + [0] * pad
        generation = [0.0] * 24 + _floats(rng, n) + [0.0] * pad
        previous = [0.0] + _floats(rng, width - 1)
        reward = float(rng.integers(0, 2))
        sample = {
            "content": [[f"Q{group}: what is 2 + {group}?", "the answer is 4", "Environment: correct"]],
            "rewards": [reward],
            "input_lengths": [24 + n],
            "token_ids": [ids],
            "token_loss_mask": [mask],
            "sample_loss_mask": [1.0],
            "advantages": [[reward - 0.5] * width],
            "generation_logprobs": [generation],
            "prev_logprobs": [previous],
        }
        lines = files.setdefault(step + 1, [])
        lines.append(json.dumps({**sample, "idx": len(lines)}, default=str))
    for step, lines in files.items():
        (folder / f"train_data_step{step}.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def write_prime_rl(folder: Path, total_tokens: int, seed: int = 2) -> Path:
    """`token_exports/step_<N>/rank_0.jsonl` and `STABLE`: one sample a line, prompt and completion
    packed, compact separators (`tests/backend/ingest/test_token_formats.py` has the source lines)."""
    steps: dict[int, list[str]] = {}
    for i, step, group, n, rng in _responses(total_tokens, seed):
        width = 24 + n
        advantage = float(np.float32(rng.integers(0, 2) - 0.5))
        record = {
            "schema_version": 1,
            "step": step + 1,
            "rank": 0,
            "micro_step": 0,
            "micro_sequence_idx": i,
            "export_sequence_idx": i,
            "env_name": "math",
            "token_ids": (np.arange(24) + group).tolist() + rng.integers(0, 50_000, size=n).tolist(),
            "position_ids": list(range(width)),
            "loss_mask": [False] * 24 + [True] * n,
            "advantages": [0.0] * 24 + [advantage] * n,
            "inference_logprobs": [0.0] * 24 + _floats(rng, n),
            "trainer_logprobs": _floats(rng, width),
            "entropy": (rng.exponential(1.0, size=width).astype(np.float32)).tolist(),
        }
        steps.setdefault(step + 1, []).append(json.dumps(record, separators=(",", ":"), allow_nan=False))
    for step, lines in steps.items():
        step_dir = folder / "token_exports" / f"step_{step}"
        step_dir.mkdir(parents=True)
        (step_dir / "rank_0.jsonl").write_text("\n".join(lines) + "\n")
        (step_dir / "STABLE").touch()
    return folder


def write_rl_logging_board(folder: Path, total_tokens: int, seed: int = 3) -> Path:
    """A folder of `*.jsonl`, one line per response with `convert_ids_to_tokens` strings and the per-token
    lists (`tests/backend/ingest/test_token_formats.py` has the source lines)."""
    folder.mkdir()
    with open(folder / "rank0.jsonl", "w", encoding="utf8") as out:
        for _, step, group, n, rng in _responses(total_tokens, seed):
            logprobs = _floats(rng, n)
            reward = float(rng.integers(0, 2))
            line = {
                "prompt": f"<PAD>prompt {group}",
                "response": "the answer is 4<PAD>",
                "response_tokens": [f"Ġt{t}" for t in rng.integers(0, 50_000, size=n).tolist()] + ["<PAD>"],
                "logprobs": logprobs,
                "ref_logprobs": _floats(rng, n),
                "values": rng.uniform(-1, 1, size=n).tolist(),
                "token_rewards": [0.0] * (n - 1) + [reward],
                "reward": reward,
                "step": step,
            }
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    return folder


_WORDS = np.array(["the", "sum", "is", "carry", "1", "12", "so", "answer", "=", "+", "\n", "####", ","])


def write_verl(folder: Path, total_tokens: int, seed: int = 4) -> Path:
    """`{step}.jsonl` as verl's `_write_generations` writes it: decoded text, no token ids (a token here
    is a word or a sign, what simple tokenization finds)."""
    folder.mkdir()
    files: dict[int, list[str]] = {}
    for _, step, group, n, rng in _responses(total_tokens, seed):
        words = _WORDS[rng.integers(0, len(_WORDS), size=n)]
        entry = {
            "input": f"question {group}: what is {group} + 7?",
            "output": " ".join(words),
            "gts": str(group + 7),
            "score": float(rng.integers(0, 2)),
            "step": step + 1,
        }
        files.setdefault(step + 1, []).append(json.dumps(entry, ensure_ascii=False, default=str))
    for step, lines in files.items():
        (folder / f"{step}.jsonl").write_text("\n".join(lines) + "\n")
    return folder
