"""Native JSONL read by pyarrow a block at a time: the per-record path's record keys and stored rows, and
lines it cannot prove go line by line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from backend.ingest import arrow_jsonl, import_path, import_records
from backend.ingest.fast_parquet import Unsupported
from backend.ingest.sources import record_key
from tests.backend.ingest.test_fast_jsonl import _stored

LABELS = ["a", " b", "\n", '"q"', "back\\slash", "tab\t", "ü", "你好", "\x01", "😀", "\u2028", ""]


def _records(n: int, seed: int, group: object = None) -> list[dict]:
    rng = random.Random(seed)
    records = []
    for i in range(n):
        length = rng.randint(0, 40)
        record = {
            "prompt": f"naïve {i // 4} – 你好" if i % 5 == 0 else f"prompt {i // 4}",
            "response": 'r "quoted" \\ \n',
            "step": i // 16,
            "token_ids": [rng.randint(0, 2**31 - 1) for _ in range(length)],
            "tokens": [rng.choice(LABELS) for _ in range(length)],
            "logprobs": [
                rng.choice([-rng.random(), -1e-05, -1.5e-7, -0.0, -123.25, -1e16]) for _ in range(length)
            ],
            "entropies": [rng.random() * 10 ** rng.randint(-9, 3) for _ in range(length)],
            "rewards": {"task": rng.randint(0, 1), "style": -rng.random()},
        }
        if group is not None:
            record["group"] = group if isinstance(group, str) else i // 4
        records.append(record)
    return records


def _write(path: Path, records: list[dict], **dumps) -> Path:
    path.write_text("".join(json.dumps(r, **dumps) + "\n" for r in records))
    return path


def _per_record_keys(path: Path) -> list[int]:
    lines = [line for line in path.read_bytes().split(b"\n") if line.strip()]  # not str.splitlines: U+2028
    return [record_key(path.name, i, json.loads(line)) for i, line in enumerate(lines)]


@pytest.mark.parametrize("ensure_ascii", [True, False])
@pytest.mark.parametrize("group", [None, 3, "g"])
def test_every_block_is_proven_and_its_keys_are_the_per_record_keys(tmp_path, ensure_ascii, group):
    path = _write(tmp_path / "run.jsonl", _records(60, seed=1, group=group), ensure_ascii=ensure_ascii)
    keys, index = [], 0
    for block in arrow_jsonl.iter_blocks(path, block_bytes=4096):  # lines cut across reads
        table, block_keys = arrow_jsonl.parse_block(block, path.name, index)
        assert table.num_rows == len(block.starts)
        keys += block_keys.tolist()
        index += len(block.starts)
    assert keys == _per_record_keys(path)


def test_blocks_give_back_every_line_with_its_number(tmp_path):
    path = tmp_path / "lines.jsonl"
    text = '{"a": 1}\n\n' + "x" * 9000 + "\n  \n" + '{"b": 2}\r\n' + "last, no newline"
    path.write_text(text)
    lines = [line for block in arrow_jsonl.iter_blocks(path, block_bytes=1000) for line in block.raw_lines()]
    assert lines == list(enumerate(text.encode().splitlines(keepends=True), start=1))


def _same_as_the_per_record_path(store, path: Path) -> None:
    report = import_path(store, path, "fast")
    parsed = [json.loads(line) for line in path.read_bytes().split(b"\n") if line.strip()]
    keyed = [{**rec, "record_key": key} for rec, key in zip(parsed, _per_record_keys(path), strict=True)]
    import_records(store, "slow", keyed)
    assert report.records == len(parsed)
    assert _stored(store, "fast") == _stored(store, "slow")


@pytest.mark.parametrize("labels", [True, False])
@pytest.mark.parametrize("group", [None, 7, "g"])
def test_rows_are_the_per_record_rows(store, tmp_path, group, labels):
    records = _records(50, seed=2, group=group)
    for record in records if not labels else ():  # no labels: the importer's <id> labels
        del record["tokens"]
    path = _write(tmp_path / "run.jsonl", records)
    path.write_text(path.read_text().replace("\n", "\n\n", 3))  # blank lines are no records
    for block in arrow_jsonl.iter_blocks(path):  # the pyarrow path takes every line
        arrow_jsonl.parse_block(block, path.name, 0)
    _same_as_the_per_record_path(store, path)


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.update(logprobs=[0] + r["logprobs"][1:]),  # an int among floats: json keeps it an int
        lambda r: r.update(step=None),  # null, not absent
        lambda r: r.update(rewards={"style": r["rewards"]["style"], "task": r["rewards"]["task"]}),  # order
        lambda r: r.update(meta={"ground_truth": "4"}),  # a field this path does not take
    ],
)
def test_a_line_that_is_not_proven_goes_line_by_line(store, tmp_path, change):
    records = _records(20, seed=3)
    for record in records:
        record["token_ids"] = record["token_ids"] or [1]
        record["logprobs"] = record["logprobs"] or [-0.5]
        del record["tokens"], record["entropies"]
    change(records[0])
    change(records[9])
    path = _write(tmp_path / "run.jsonl", records)
    with pytest.raises(Unsupported):
        arrow_jsonl.parse_block(next(arrow_jsonl.iter_blocks(path)), path.name, 0)
    if records[0].get("step", 0) is None:
        with pytest.raises(Exception, match="line 1: field 'step'"):
            import_path(store, path, "fast")
        return
    _same_as_the_per_record_path(store, path)


def test_windows_line_ends_go_line_by_line(store, tmp_path):
    records = _records(10, seed=4)
    path = tmp_path / "crlf.jsonl"
    path.write_bytes("".join(json.dumps(r) + "\r\n" for r in records).encode())
    with pytest.raises(Unsupported):
        arrow_jsonl.parse_block(next(arrow_jsonl.iter_blocks(path)), path.name, 0)
    _same_as_the_per_record_path(store, path)
