"""The canonical JSON text of a parsed record, byte-identical to `json.dumps(value, sort_keys=True,
ensure_ascii=False)` (what `sources.record_key` hashes), in a fraction of its time.

Why: on records with per-token lists `json.dumps` spends most of its time formatting floats one by one
(measured 0.31 M tokens/s on the `bench scale` records at load ~4, slower than parsing them), and the
record keys of JSONL imports must not change (a file imported before must be recognised again).
orjson formats a list of numbers in C, but not as python does: no space after commas, and floats below
1e-4 or from 1e16 up are written differently (`0.00001` / `1e-7` where python writes `1e-05` / `1e-07`).
Both formatters give the shortest round-trip digits, so only those numbers are re-formatted, with
python's own `repr`; lists that hold strings or objects, and every string, go through `json.dumps`.
`tests/backend/ingest/test_fast_jsonl.py` compares the two on random doubles and edge cases.
"""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import orjson

# The floats orjson formats unlike python (checked on 1.2M doubles, see the tests): those it writes with an
# exponent below 1e-4 (python pads the exponent to two digits) and those it writes "0.0000..." (python
# switches to an exponent below 1e-4). Matched with the "[" or "," before them, so that the pattern
# cannot start inside a number; integers never match (they have neither).
_UNLIKE_PYTHON = re.compile(rb"([\[,])(-?(?:0\.0000\d*|\d[\d.]*e-\d+))")


def _python_float(match: re.Match) -> bytes:
    return match.group(1) + repr(float(match.group(2))).encode()


def python_numbers(data: bytes) -> bytes:
    """orjson's text of a list that holds no strings (numbers, booleans, nulls, nested lists of them) as
    `json.dumps` writes it."""
    if b"e-" in data or b"0.0000" in data:
        data = _UNLIKE_PYTHON.sub(_python_float, data)
    return data.replace(b",", b", ")


def _dumps(value: object) -> str:
    if isinstance(value, dict):
        items = sorted(value.items())
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_dumps(v)}" for k, v in items) + "}"
    if isinstance(value, list) and value:
        data = orjson.dumps(value)
        if b'"' not in data:  # numbers, booleans, nulls and nested lists of them: no text to misread
            return python_numbers(data).decode()
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def canonical_json(value: object) -> str:
    """`json.dumps(value, sort_keys=True, ensure_ascii=False)` for a value parsed from JSON text that
    orjson accepts (no NaN or infinity, no unpaired surrogates, integers within 64 bits)."""
    return _dumps(value)


def positional_keys(name: str, first: int, n: int) -> np.ndarray:
    """(n,) int64: `record_key_of_text(name, i, "")` for i in first..first+n-1, the keys of records known by
    their position alone (native Parquet rows), without a python call per record beyond the hash."""
    blake2b = hashlib.blake2b
    prefix = f"{name}\x1f"
    digests = b"".join(
        blake2b(f"{prefix}{i}\x1f".encode("utf-8", "surrogatepass"), digest_size=8).digest()
        for i in range(first, first + n)
    )
    return np.frombuffer(digests, dtype="<i8").astype(np.int64)


def record_key_of_text(name: str, index: int, text: str) -> int:
    """`sources.record_key(name, index, record)` given `canonical_json(record)`."""
    digest = hashlib.blake2b(f"{name}\x1f{index}\x1f{text}".encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "little", signed=True)
