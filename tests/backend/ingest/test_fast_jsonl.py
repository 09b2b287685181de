"""The vectorized native JSONL import: the same record keys, stored rows and errors as the per-record path."""

import json
import math
import random
import struct
from pathlib import Path

import pytest

from backend.core.errors import InputError
from backend.ingest import import_path, import_records
from backend.ingest.canonical import canonical_json
from backend.ingest.sources import record_key
from tests.conftest import make_records, snapshot, write_jsonl

SAMPLES = Path(__file__).resolve().parents[3] / "sample_runs"
EDGE_RECORDS = [
    {
        "prompt": "naïve café – 你好 😀",
        "response": '\u2028\u007f"quote" \\ back\nline\ttab\u0001',
        "rewards": {"task": 1e-07, "style": -0.0, "ünï": 0.1},
        "token_ids": [1, 2],
        "logprobs": [1e-07, 0.1],
        "meta": {"z": [1, {"b": 2.5e-05, "a": None}], "a": "😀", "nested": {"x": [True, False, None]}},
    },
    {
        "prompt": "p",
        "response": "r",
        "rewards": {"task": 1},
        "token_ids": [2**63 - 1, -(2**63)],
        "values": [
            0.00001,
            0.0001,
            0.00011,
            1e16,
            1e15,
            123456789012345680.0,
            5e-324,
            1.7976931348623157e308,
        ],
        "entropies": [0, 1, 0.5],
        "extras": {},
        "token_rewards": {"s": [[1e-9, 2], []]},
        "group": None,
    },
    {"b": [], "a": {}, "c": "", "d": [[]], "e": [-1.5e-300, 10.00001, 100.0, -0.0001]},
]


def test_canonical_json_is_json_dumps_byte_for_byte():
    rng = random.Random(0)
    doubles = [struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0] for _ in range(50_000)]
    doubles += [rng.random() * 10 ** rng.randint(-12, 20) for _ in range(50_000)]
    doubles += [m * 10.0**e for e in range(-320, 308) for m in (1, -1.5, 9.99, 3.14159)]
    doubles = [x for x in doubles if math.isfinite(x)]
    for value in [doubles, *EDGE_RECORDS]:
        assert canonical_json(value) == json.dumps(value, sort_keys=True, ensure_ascii=False)
    for path in sorted(SAMPLES.glob("*.jsonl")):  # the bundled runs, as the importer parses them
        for line in path.read_text().splitlines():
            record = json.loads(line)
            assert canonical_json(record) == json.dumps(record, sort_keys=True, ensure_ascii=False)


def _stored(store, run: str):
    rollouts = store.con.execute(
        "SELECT * EXCLUDE (run_id) FROM rollouts WHERE run_id = ? ORDER BY rollout_id", [store.run_id(run)]
    ).fetchall()
    others = {
        table: store.con.execute(
            f"SELECT * EXCLUDE (run_id) FROM {table} WHERE run_id = ? ORDER BY ALL", [store.run_id(run)]
        ).fetchall()
        for table in ("groups", "scores", "token_rewards", "token_features")
    }
    return rollouts, others


def test_keys_and_rows_equal_the_per_record_path(store, tmp_path):
    odd = {
        "prompt": "p",
        "response": "r",
        "rewards": {"task": 1, "x": 2.5},
        "token_ids": [3, 1, 2],
        "values": [0.00001, 1e16, 5e-324],
        "entropies": [0, 1, 0.5],
        "extras": {},
        "group": None,
        "token_rewards": {"s": [1e-9, 2, -0.0]},
        "meta": None,
    }
    records = make_records(n_groups=4, group_size=4, steps=2, seed=3) + [EDGE_RECORDS[0], odd]
    records[3]["meta"] = {"ground_truth": 12, "note": "x"}
    records[5]["tokens"] = [f"t{i}" for i in range(len(records[5]["token_ids"]))]
    records[6]["meta"] = {"past_64_bits": 2**70, "float": 1e300, "ints": [2**64, -(2**63) - 1]}
    path = write_jsonl(tmp_path / "run.jsonl", records)
    with open(path, "a") as fh:  # blank lines are not records and do not count in the keys' positions
        fh.write("\n   \n")
    path.write_text(path.read_text().replace("\n", "\n\n", 2))
    report = import_path(store, path, "fast")
    assert report.records == len(records) and report.tokenization == "ids"
    # What the per-record reader stored for these lines: the same dicts with the keys it computed.
    parsed = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    keyed = [{**rec, "record_key": record_key(path.name, i, rec)} for i, rec in enumerate(parsed)]
    import_records(store, "slow", keyed)
    fast_rows, fast_tables = _stored(store, "fast")
    slow_rows, slow_tables = _stored(store, "slow")
    assert fast_rows == slow_rows and fast_tables == slow_tables
    stored_keys = [
        row[0]
        for row in store.con.execute(
            "SELECT record_key FROM rollouts WHERE run_id = ? ORDER BY rollout_id", [store.run_id("fast")]
        ).fetchall()
    ]
    assert stored_keys == [rec["record_key"] for rec in keyed]


def test_a_file_imported_by_the_per_record_path_is_recognised(store, tmp_path):
    path = write_jsonl(tmp_path / "run.jsonl", make_records(n_groups=3, seed=5))
    parsed = [json.loads(line) for line in path.read_text().splitlines()]
    # The per-record path's rows: each record with record_key(file name, position, record).
    keyed = [{**rec, "record_key": record_key(path.name, i, rec)} for i, rec in enumerate(parsed)]
    import_records(store, "r", keyed)
    before = snapshot(store)
    report = import_path(store, path, "r")
    assert report.records == 0 and report.skipped == len(parsed)
    after = snapshot(store)
    assert after.pop("imports") == before.pop("imports") + 1 and after == before  # only the file's hash
    grown = write_jsonl(tmp_path / "run.jsonl", parsed + make_records(n_groups=1, seed=6))
    again = import_path(store, grown, "r")
    assert again.skipped == len(parsed) and again.records == 4


def _many(n: int) -> list[dict]:
    return [
        {
            "prompt": f"p{i // 4}",
            "response": "r",
            "rewards": {"task": float(i % 2)},
            "token_ids": [i % 50, 7, 9],
            "logprobs": [-0.5, -1.0, -0.25],
        }
        for i in range(n)
    ]


@pytest.mark.parametrize("line", [1500, 2500])
def test_a_malformed_line_in_the_middle_names_its_line_and_changes_nothing(store, tmp_path, line):
    import_path(store, write_jsonl(tmp_path / "first.jsonl", _many(8)), "r")
    before = snapshot(store)
    records: list = _many(3000)
    records[line - 1] = '{"prompt": "p", "response": '
    with pytest.raises(InputError, match=rf"bad\.jsonl: line {line}: malformed JSON"):
        import_path(store, write_jsonl(tmp_path / "bad.jsonl", records), "r")
    assert snapshot(store) == before


def test_a_length_mismatch_names_the_line_and_the_field(store, tmp_path):
    before = snapshot(store)
    records = _many(3000)
    records[2199]["logprobs"] = [-0.5]
    message = r"bad\.jsonl: line 2200: field 'logprobs' has 1 entries but 'token_ids' has 3"
    with pytest.raises(InputError, match=message):
        import_path(store, write_jsonl(tmp_path / "bad.jsonl", records), "r")
    assert snapshot(store) == before and not store.has_run("r")


def test_the_first_bad_line_is_named_whatever_kind_of_error_follows(store, tmp_path):
    records: list = _many(40)
    records[9]["rewards"] = {"task": True}
    records[19] = "{not json"
    with pytest.raises(InputError, match=r"line 10: field 'rewards.task' must be a number, got a boolean"):
        import_path(store, write_jsonl(tmp_path / "bad.jsonl", records), "r")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"logprobs": [-0.5, True, 0.0]}, r"line 3: field 'logprobs'\[1\] must be a number, got a boolean"),
        ({"token_ids": [1, None, 2]}, r"line 3: field 'token_ids'\[1\] must be an integer, got null"),
        ({"tokens": ["a", None, "c"]}, r"line 3: field 'tokens' must be a list of strings"),
        ({"step": -1}, r"line 3: field 'step' must be a non-negative integer, got -1"),
        ({"step": True}, r"line 3: field 'step' must be a non-negative integer, got a boolean"),
        ({"token_rewards": {"s": [0.5, False, 1]}}, r"line 3: field 'token_rewards.s'\[1\] must be a number"),
        ({"token_ids": [1, 2.0, 3]}, r"line 3: field 'token_ids'\[1\] must be an integer, got 2.0"),
        ({"token_ids": [1, 2**40, 3]}, r"line 3: field 'token_ids'\[1\] = 1099511627776 does not fit"),
        ({"token_ids": [1, 2**64, 3]}, r"line 3: field 'token_ids'\[1\] = 18446744073709551616 does not fit"),
    ],
)
def test_values_arrow_would_accept_get_the_per_record_error(store, tmp_path, change, message):
    records = _many(6)
    records[2].update(change)
    with pytest.raises(InputError, match=message):
        import_path(store, write_jsonl(tmp_path / "bad.jsonl", records), "r")
    assert not store.has_run("r")


def test_nan_and_records_without_ids_take_the_per_record_path(store, tmp_path):
    text = tmp_path / "nan.jsonl"
    text.write_text(json.dumps(_many(1)[0]).replace("-0.25", "NaN") + "\n")
    with pytest.raises(InputError, match=r"nan\.jsonl: line 1: field 'logprobs'\[2\] is nan"):
        import_path(store, text, "r")
    # json (not orjson) parses this line: its unpaired surrogate reaches the per-record check
    record = {**_many(1)[0], "meta": {"\ud800": 1}, "values": [0.0, float("nan"), 1]}
    text.write_text(json.dumps(record) + "\n")
    with pytest.raises(InputError, match=r"line 1: field 'meta' holds text with an unpaired surrogate"):
        import_path(store, text, "r")
    mixed = _many(6)
    del mixed[4]["token_ids"], mixed[4]["logprobs"]
    report = import_path(store, write_jsonl(tmp_path / "mixed.jsonl", mixed), "r")
    assert report.records == 6 and report.tokenization == "simple"
