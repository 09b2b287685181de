"""The importers' fuzz loops as functions of their cases, so that one loop serves three callers: the quick
tests (a few cases from a fixed seed), the long mode (`python -m bench reliability --loops`: thousands of
cases) and its time-boxed share in every suite run (tests/reliability/test_long_share.py: cases the quick
tests never reach, from seeds of its own, for as long as its box lasts).

A property case is what one hypothesis example checks (`PROPERTY_CASES`: the case and what it draws); a
mutation loop takes a `random.Random` and an iterable of case numbers (`range(n)`, or `until(deadline)`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from tests.conftest import make_records
from tests.reliability.fuzzing import (
    check_import,
    mutate_bytes,
    mutate_record,
    native_record,
    native_table,
    trl_table,
    try_write_parquet,
    verl_line,
    write_jsonl,
)


def until(deadline: float, at_least: int = 0) -> Iterator[int]:
    """Case numbers 0, 1, ... while `time.monotonic()` is before `deadline` (and at least `at_least`)."""
    k = 0
    while k < at_least or time.monotonic() < deadline:
        yield k
        k += 1


# --- property cases ---------------------------------------------------------------------------------------
def native_records_case(db: Path, tmp_path_factory, records: list, dup: bool) -> None:
    if dup:
        records = records + records[:1]  # duplicate records are legal: they become separate rollouts
    d = tmp_path_factory.mktemp("native")
    check_import(db, write_jsonl(d / "run.jsonl", records), "native jsonl (hypothesis)")
    parquet = try_write_parquet(d / "run.parquet", records)
    if parquet is not None:
        check_import(db, parquet, "native parquet (hypothesis)")


def native_table_case(db: Path, tmp_path_factory, table: pa.Table) -> None:
    path = tmp_path_factory.mktemp("fast") / "run.parquet"
    pq.write_table(table, path)
    check_import(db, path, "native parquet typed (hypothesis)")


def verl_case(db: Path, tmp_path_factory, lines: list, as_dir: bool) -> None:
    d = tmp_path_factory.mktemp("verl")
    if as_dir:
        write_jsonl(d / "3.jsonl", lines)
        check_import(db, d, "verl dir (hypothesis)", fmt="verl")
    else:
        check_import(db, write_jsonl(d / "7.jsonl", lines), "verl file (hypothesis)", fmt="verl")


def trl_case(db: Path, tmp_path_factory, table: pa.Table) -> None:
    d = tmp_path_factory.mktemp("trl")
    (d / "completions").mkdir()
    pq.write_table(table, d / "completions" / "completions_00010.parquet")
    check_import(db, d, "trl (hypothesis)", fmt="trl")


@dataclass(frozen=True)
class PropertyCase:
    check: Callable[..., None]  # check(db, tmp_path_factory, **drawn)
    draws: dict[str, st.SearchStrategy]


PROPERTY_CASES = {
    "native records": PropertyCase(
        native_records_case,
        {"records": st.lists(native_record(), min_size=1, max_size=4), "dup": st.booleans()},
    ),
    "native table": PropertyCase(native_table_case, {"table": native_table()}),
    "verl": PropertyCase(
        verl_case, {"lines": st.lists(verl_line(), min_size=1, max_size=4), "as_dir": st.booleans()}
    ),
    "trl": PropertyCase(trl_case, {"table": trl_table()}),
}


# --- mutation loops ---------------------------------------------------------------------------------------
def valid_files(d: Path) -> tuple[list[dict], Path, Path]:
    """Valid native records, and the same as a native JSONL file and a verl dump in `d`."""
    records = make_records(n_groups=2, group_size=3, steps=2, seed=3)
    native = write_jsonl(d / "native.jsonl", records)
    verl = write_jsonl(
        d / "5.jsonl",
        [
            {
                "input": r["prompt"],
                "output": r["response"],
                "score": r["rewards"]["task"],
                "acc": True,
                "gts": "4",
                "step": 5,
            }
            for r in records
        ],
    )
    return records, native, verl


def jsonl_byte_mutations(db: Path, d: Path, rng: random.Random, cases: Iterable[int]) -> None:
    _, native, verl = valid_files(d)
    for k in cases:
        source, fmt = (native, "native") if k % 2 == 0 else (verl, "verl")
        op, data = mutate_bytes(source.read_bytes(), rng)
        path = d / f"m{k}.jsonl"
        path.write_bytes(data)
        check_import(db, path, f"{fmt} jsonl byte mutation ({op})", fmt=fmt)
        path.unlink()


def record_mutations(db: Path, d: Path, rng: random.Random, cases: Iterable[int]) -> None:
    records, _, _ = valid_files(d)
    for k in cases:
        bad = list(records)
        i = rng.randrange(len(bad))
        op, bad[i] = mutate_record(bad[i], rng)
        check_import(db, write_jsonl(d / f"s{k}.jsonl", bad), "native jsonl field mutation")
        if k % 3 == 0:
            parquet = try_write_parquet(d / f"s{k}.parquet", bad)
            if parquet is not None:
                check_import(db, parquet, "native parquet field mutation")


def parquet_byte_mutations(db: Path, d: Path, rng: random.Random, cases: Iterable[int]) -> None:
    """A native and a TRL Parquet file (uncompressed, row groups of 5), damaged: each case one of each."""
    records = make_records(n_groups=4, group_size=4, seed=5)
    src = d / "run.parquet"
    pq.write_table(pa.Table.from_pylist(records), src, row_group_size=5, compression="none")
    trl_src = d / "trl.parquet"
    pq.write_table(
        pa.table(
            {
                "step": [1] * 16,
                "prompt": [r["prompt"] for r in records],
                "completion": [r["response"] for r in records],
                "accuracy": [1.0] * 16,
            }
        ),
        trl_src,
        row_group_size=5,
        compression="none",
    )
    for k in cases:
        for source, fmt in ((src, "native"), (trl_src, "trl")):
            data = bytearray(source.read_bytes())
            op = rng.choice(["flip page bytes", "truncate", "zero a run"])
            if op == "truncate":
                data = data[: rng.randrange(len(data))]
            elif op == "zero a run":
                i = rng.randrange(4, len(data) - 300)
                data[i : i + rng.randint(1, 64)] = bytes(rng.randint(1, 64))[: len(data[i : i + 64])]
            else:  # damage data pages but keep the footer, so the failure comes mid-read
                for _ in range(rng.randint(1, 6)):
                    data[rng.randrange(4, len(data) - 300)] = rng.randrange(256)
            path = d / f"p{k}.parquet"
            path.write_bytes(bytes(data))
            check_import(db, path, f"{fmt} parquet byte mutation ({op})", fmt=fmt)
            path.unlink()
