"""Bad input, fuzzed, through `creditlens import`: every importer, property-based and mutation-based.

Each case ends in a correct import or in exit 2 with one line naming file, line/record and field, and
the store's tables (row counts and a content checksum) exactly as before. pytest-timeout catches hangs.
"""

from __future__ import annotations

import json
import random
import subprocess

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from transformers import AutoTokenizer

from tests.backend.ingest.test_token_formats import (
    DEMO,
    byte_level_bpe,
    prime_rl_samples,
    write_board_files,
    write_nemo_rl_step,
    write_prime_rl_step,
)
from tests.conftest import LONG_EXAMPLES_DB
from tests.reliability.conftest import (
    LONG,
    PYTHON,
    ROOT,
    assert_clean_error,
    instance_held,
    long_budget,
    run_cli,
    store_digest,
    tally,
)
from tests.reliability.fuzzing import check_import, mutate_bytes, try_write_parquet, write_jsonl
from tests.reliability.loops import (
    PROPERTY_CASES,
    jsonl_byte_mutations,
    native_records_case,
    native_table_case,
    parquet_byte_mutations,
    record_mutations,
    trl_case,
    verl_case,
)

# A hang fails within two minutes; the long mode runs 33x the cases (2,000 mutations take 3-4 minutes on a
# busy 2-core box, where 120 s cut them short: a timeout, not a finding).
pytestmark = pytest.mark.timeout(1800 if LONG else 120)

EXAMPLES = long_budget(400, 20)
MUTATIONS = long_budget(2000, 60)
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not LONG,  # CI runs the same cases every time; the long mode explores
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


@pytest.fixture(autouse=True)
def _instance_held(request, base_store):
    """Each test's cases import into `base_store` with its DuckDB instance held open (`instance_held`: the
    same commands, without rebuilding the instance per connection); a test marked `other_process` lets
    another process open the store, so its instance is not held."""
    if request.node.get_closest_marker("other_process") is not None:
        yield
        return
    with instance_held(base_store):
        yield


# --- property-based ------------------------------------------------------------------------------
@FUZZ
@given(**PROPERTY_CASES["native records"].draws)
def test_native_records_fuzzed_as_jsonl_and_parquet(base_store, tmp_path_factory, records, dup):
    native_records_case(base_store, tmp_path_factory, records=records, dup=dup)


@FUZZ
@given(**PROPERTY_CASES["native table"].draws)
def test_native_parquet_fast_path_fuzzed(base_store, tmp_path_factory, table):
    native_table_case(base_store, tmp_path_factory, table=table)


@FUZZ
@given(**PROPERTY_CASES["verl"].draws)
def test_verl_dumps_fuzzed(base_store, tmp_path_factory, lines, as_dir):
    verl_case(base_store, tmp_path_factory, lines=lines, as_dir=as_dir)


@FUZZ
@given(**PROPERTY_CASES["trl"].draws)
def test_trl_completions_fuzzed(base_store, tmp_path_factory, table):
    trl_case(base_store, tmp_path_factory, table=table)


# --- mutation: each loop from its own seed (the time-boxed share runs them on from others) -----------------
def test_byte_mutations_of_jsonl_files(base_store, tmp_path):
    jsonl_byte_mutations(base_store, tmp_path, random.Random(1), range(MUTATIONS))


def test_structural_mutations_of_records(base_store, tmp_path):
    record_mutations(base_store, tmp_path, random.Random(2), range(MUTATIONS))


def test_byte_mutations_of_parquet_files(base_store, tmp_path):
    parquet_byte_mutations(base_store, tmp_path, random.Random(3), range(MUTATIONS // 2))


# --- named edge cases -------------------------------------------------------------------------------
GOOD = {"prompt": "p", "response": "a b", "token_ids": [1, 2], "rewards": {"task": 1.0}}


def _lines(tmp_path, name, raw: bytes):
    path = tmp_path / name
    path.write_bytes(raw)
    return path


EDGE_ERRORS = {
    "empty.jsonl": b"",
    "blank_lines.jsonl": b"\n\n   \n",
    "truncated_line.jsonl": json.dumps(GOOD).encode() + b"\n" + json.dumps(GOOD).encode()[:17],
    "invalid_utf8.jsonl": b'{"prompt": "\xff\xfe", "response": "r", "rewards": {"task": 1}}\n',
    "lone_surrogate.jsonl": b'{"prompt": "p", "response": "\\ud800", "rewards": {"task": 1}}\n',
    "surrogate_token.jsonl": b'{"prompt": "p", "response": "r", "token_ids": [1], "tokens": ["\\udfff"], '
    b'"rewards": {"task": 1}}\n',
    "bom.jsonl": b"\xef\xbb\xbf" + json.dumps(GOOD).encode() + b"\n",
    "deep_nesting.jsonl": b'{"prompt": ' + b"[" * 100000 + b"]" * 100000 + b"}\n",
    "huge_int_reward.jsonl": b'{"prompt": "p", "response": "r", "rewards": {"task": 1' + b"0" * 400 + b"}}",
    "too_many_digits.jsonl": b'{"prompt": "p", "response": "r", "rewards": {"task": 1' + b"0" * 5000 + b"}}",
    "huge_float_logprob.jsonl": json.dumps(dict(GOOD, logprobs=[1e39, 0.0])).encode(),
    "nan_reward.jsonl": b'{"prompt": "p", "response": "r", "rewards": {"task": NaN}}\n',
    "inf_entropy.jsonl": json.dumps(dict(GOOD, entropies=[float("inf"), 0.0])).encode(),
    "bool_reward.jsonl": json.dumps(dict(GOOD, rewards={"task": True})).encode(),
    "string_token_id.jsonl": json.dumps(dict(GOOD, token_ids=["1", 2])).encode(),
    "token_id_2_31.jsonl": json.dumps(dict(GOOD, token_ids=[2**31, 2])).encode(),
    "negative_step.jsonl": json.dumps(dict(GOOD, step=-1)).encode(),
    "mismatched_logprobs.jsonl": json.dumps(dict(GOOD, logprobs=[0.1])).encode(),
    "mismatched_tokens.jsonl": json.dumps(dict(GOOD, tokens=["a", "b", "c"])).encode(),
    "mismatched_token_rewards.jsonl": json.dumps(dict(GOOD, token_rewards={"style": [0.0]})).encode(),
    "empty_rewards.jsonl": json.dumps(dict(GOOD, rewards={})).encode(),
    "rewards_list.jsonl": json.dumps(dict(GOOD, rewards=[1.0])).encode(),
    "record_is_list.jsonl": b"[1, 2, 3]\n",
    "nested_garbage_meta.jsonl": json.dumps(dict(GOOD, meta=[[{"a": [None]}]])).encode(),
    "null_byte.jsonl": b'{"prompt": "p"\x00, "response": "r", "rewards": {"task": 1}}\n',
}


@pytest.mark.parametrize("name", sorted(EDGE_ERRORS))
def test_edge_cases_fail_cleanly(base_store, tmp_path, name):
    path = _lines(tmp_path, name, EDGE_ERRORS[name])
    check_import(base_store, path, "native jsonl edge case", fmt="native", expect="clean error")


# Names taken from the input with a control character: the long loops once found `"rewards": {"\r": null}`
# printed raw ("field 'rewards.<CR>' must be a number": two lines), and a Parquet prompt column of
# list<struct<"\r": null>> whose type was printed raw.
CONTROL_NAMES = ["\r", "\n", "a\x1b[31mred", "\u2028", "\x00"]


@pytest.mark.parametrize("name", CONTROL_NAMES, ids=repr)
def test_names_with_control_characters_give_one_quoted_line(base_store, tmp_path, name):
    shown = repr(name)[1:-1]
    for value in (None, 1.0):  # a channel that fails its value, and one that would be imported
        records = [dict(GOOD, rewards={name: value})]
        jsonl = write_jsonl(tmp_path / "names.jsonl", records)
        msg = assert_clean_error(run_cli(["import", jsonl, "--db", base_store, "--run", "fuzz"]), jsonl)
        assert shown in msg, msg
        parquet = try_write_parquet(tmp_path / "names.parquet", records)
        if parquet is not None:
            msg = assert_clean_error(
                run_cli(["import", parquet, "--db", base_store, "--run", "fuzz"]), parquet
            )
            assert shown in msg, msg
    typed = tmp_path / "typed.parquet"
    prompt_type = pa.list_(pa.struct([(name, pa.null())]))
    pq.write_table(
        pa.table(
            {
                "prompt": pa.array([[{name: None}]], prompt_type),
                "response": ["a b"],
                "token_ids": pa.array([[1, 2]], pa.list_(pa.int32())),
                "rewards": pa.array([{"task": 1.0}]),
            }
        ),
        typed,
    )
    check_import(base_store, typed, "native parquet edge case", expect="clean error")


def test_a_column_name_with_a_control_character_is_quoted_in_the_import_summary(base_store, tmp_path):
    """A TRL log's extra columns go to meta and are listed in the summary: a name with a line break is shown
    quoted, so the summary keeps its lines."""
    path = tmp_path / "completions_00001.parquet"
    table = {"prompt": ["p"] * 2, "completion": ["a", "b"], "r": [1.0, 0.0], "x\ry": ["s", "t"]}
    pq.write_table(pa.table(table), path)
    result = run_cli(["import", path, "--db", base_store, "--run", "named", "--quiet"])
    assert result.rc == 0, result.err
    assert "\r" not in result.out and "kept in meta: 'x\\ry'" in result.out, result.out
    assert run_cli(["delete", "--db", base_store, "--run", "named"]).rc == 0


def test_a_trl_reward_column_with_a_control_character_is_refused_in_one_line(base_store, tmp_path):
    """Found by the long loops' Parquet byte mutations: a TRL reward column renamed 'accu\x06acy'."""
    path = tmp_path / "completions_00001.parquet"
    pq.write_table(pa.table({"prompt": ["p"] * 2, "completion": ["a", "b"], "accu\x06acy": [1.0, 0.0]}), path)
    msg = assert_clean_error(run_cli(["import", path, "--db", base_store, "--run", "fuzz"]), path)
    assert "the reward column 'accu\\x06acy'" in msg, msg


def test_nul_characters_and_crlf_import_correctly(base_store, tmp_path):
    rec = dict(GOOD, prompt="a\u0000b", response="x\r\ny")
    raw = (json.dumps(rec) + "\r\n" + json.dumps(rec) + "\r\n").encode()
    check_import(
        base_store, _lines(tmp_path, "ok.jsonl", raw), "native jsonl edge case", expect="imported", records=2
    )


def test_duplicate_records_and_duplicate_file(base_store, tmp_path):
    path = write_jsonl(tmp_path / "dup.jsonl", [GOOD, GOOD, GOOD])
    check_import(base_store, path, "native jsonl edge case", expect="imported", records=3)
    assert run_cli(["import", path, "--db", base_store, "--run", "dup", "--quiet"]).rc == 0
    before = store_digest(base_store)
    again = run_cli(["import", path, "--db", base_store, "--run", "dup", "--quiet"])
    assert again.rc == 0 and "already imported" in again.out
    assert store_digest(base_store) == before
    assert run_cli(["delete", "--db", base_store, "--run", "dup"]).rc == 0
    tally("native jsonl edge case", "imported")


def test_empty_and_zero_row_parquet(base_store, tmp_path):
    empty = _lines(tmp_path, "empty.parquet", b"")
    check_import(base_store, empty, "native parquet edge case", fmt="native", expect="clean error")
    zero = tmp_path / "zero.parquet"
    pq.write_table(pa.Table.from_pylist([GOOD]).slice(0, 0), zero)
    check_import(base_store, zero, "native parquet edge case", expect="clean error")
    trl = tmp_path / "trl0"
    (trl / "completions").mkdir(parents=True)
    pq.write_table(
        pa.table(
            {
                "prompt": pa.array([], pa.string()),
                "completion": pa.array([], pa.string()),
                "r": pa.array([], pa.float64()),
            }
        ),
        trl / "completions" / "completions_1.parquet",
    )
    check_import(base_store, trl, "trl edge case", fmt="trl", expect="clean error")


def _not_utf8(texts: list[bytes]) -> pa.Array:
    """A string column holding these bytes as they are: Parquet files carry such strings (a damaged page, a
    writer that does not check), and Parquet's reader hands them on unchecked."""
    offsets = np.cumsum([0, *map(len, texts)]).astype(np.int32)
    return pa.Array.from_buffers(
        pa.string(), len(texts), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(texts))]
    )


def test_strings_that_are_not_utf8_in_parquet_fail_cleanly(base_store, tmp_path):
    bad = _not_utf8([b"what is 2+2?", b"ab\xffcd"])
    trl = tmp_path / "trl"
    (trl / "completions").mkdir(parents=True)
    for column in ("prompt", "completion"):  # the prompts are read first, on their own (groups)
        columns = {"step": [1, 1], "prompt": ["p", "p"], "completion": ["a", "b"], "accuracy": [1.0, 0.0]}
        pq.write_table(pa.table({**columns, column: bad}), trl / "completions" / "completions_00001.parquet")
        check_import(base_store, trl, "trl edge case", fmt="trl", expect="clean error")
    # a footer whose column names are not UTF-8: every reader of the schema meets it first (format detection)
    data = bytearray((trl / "completions" / "completions_00001.parquet").read_bytes())
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    data[data.index(b"completion", footer) + 3] = 0xD6
    (trl / "completions" / "completions_00001.parquet").write_bytes(bytes(data))
    for fmt in ("trl", None):
        check_import(base_store, trl, "trl edge case", fmt=fmt, expect="clean error")
    native = tmp_path / "native.parquet"
    pq.write_table(pa.table({"prompt": ["p", "q"], "response": bad, "rewards": [{"task": 1.0}] * 2}), native)
    check_import(base_store, native, "native parquet edge case", expect="clean error")
    msg = assert_clean_error(run_cli(["import", native, "--db", base_store, "--run", "x", "--quiet"]), native)
    assert "column 'response'" in msg and "UTF8" in msg, msg


def test_a_trl_log_whose_only_reward_is_null_everywhere_names_the_file(base_store, tmp_path):
    trl = tmp_path / "trl_null"
    (trl / "completions").mkdir(parents=True)
    table = pa.table(
        {"prompt": ["p", "p"], "completion": ["a", "b"], "r": pa.array([None, None], pa.float64())}
    )
    pq.write_table(table, trl / "completions" / "completions_00001.parquet")
    check_import(base_store, trl, "trl edge case", fmt="trl", expect="clean error")
    msg = assert_clean_error(run_cli(["import", trl, "--db", base_store, "--run", "x", "--quiet"]), trl)
    assert "no reward values" in msg and "'task'" in msg, msg


def test_a_100k_token_response_imports_in_both_formats(base_store, tmp_path):
    n = 100_000
    rec = {
        "prompt": "long",
        "response": "x " * n,
        "token_ids": [i % 50000 for i in range(n)],
        "logprobs": [-0.5] * n,
        "entropies": [1.0] * n,
        "rewards": {"task": 1.0},
        "token_rewards": {"style": [0.0] * n},
    }
    check_import(
        base_store,
        write_jsonl(tmp_path / "long.jsonl", [rec, GOOD]),
        "native jsonl edge case",
        expect="imported",
        records=2,
    )
    pq.write_table(pa.Table.from_pylist([rec, GOOD]), tmp_path / "long.parquet")
    check_import(
        base_store, tmp_path / "long.parquet", "native parquet edge case", expect="imported", records=2
    )
    # the same length with one entry missing is an error naming the record
    bad = dict(rec, logprobs=[-0.5] * (n - 1))
    for rows, record in (([GOOD, bad], "record 2"), ([bad, GOOD], "record 1")):
        # from_pylist takes its columns from the first row; pandas takes the union
        pq.write_table(pa.Table.from_pandas(pd.DataFrame(rows)), tmp_path / "long_bad.parquet")
        msg_path = tmp_path / "long_bad.parquet"
        result = run_cli(["import", msg_path, "--db", base_store, "--run", "fuzz", "--quiet"])
        msg = assert_clean_error(result, msg_path)
        assert record in msg and "logprobs" in msg, msg
    tally("native parquet edge case", "clean error")


def test_error_messages_name_line_and_field(base_store, tmp_path):
    lines = [GOOD, GOOD, dict(GOOD, entropies=[0.1, float("nan")])]
    path = write_jsonl(tmp_path / "third.jsonl", lines)
    msg = assert_clean_error(run_cli(["import", path, "--db", base_store, "--run", "x", "--quiet"]), path)
    assert "line 3" in msg and "'entropies'[1]" in msg
    tally("native jsonl edge case", "clean error")


# --- true subprocesses: nothing but one line reaches a user's terminal ----------------------------
@pytest.mark.other_process
@pytest.mark.parametrize("name", ["truncated_line.jsonl", "huge_int_reward.jsonl"])
def test_subprocess_cli_prints_one_line_and_no_traceback(base_store, tmp_path, name):
    path = _lines(tmp_path, name, EDGE_ERRORS[name])
    before = store_digest(base_store)
    proc = subprocess.run(
        [PYTHON, "-m", "backend.cli", "import", str(path), "--db", str(base_store), "--run", "sub"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("detected")]
    assert len(lines) == 1 and str(path) in lines[0], proc.stderr
    assert store_digest(base_store) == before
    tally("subprocess cli", "clean error")


@pytest.mark.slow
def test_byte_mutations_of_token_dumps(base_store, tmp_path):
    """NeMo-RL, prime-rl and RL Logging Board files as their projects write them, mutated byte-wise."""
    tok = AutoTokenizer.from_pretrained(str(DEMO), local_files_only=True)
    nemo = tmp_path / "train_data_step1.jsonl"
    write_nemo_rl_step(nemo, tok, 1, ["1+2", "3+4"], group=2, seed=0)
    write_prime_rl_step(tmp_path / "prime", tok, 1, prime_rl_samples(tok, 1, seed=0), ranks=1)
    prime = tmp_path / "prime" / "token_exports" / "step_1" / "rank_0.jsonl"
    write_board_files(tmp_path / "board", byte_level_bpe(tmp_path / "bpe"))
    board = tmp_path / "board" / "rank0.jsonl"
    rng = random.Random(2)
    sources = [(nemo, "nemo-rl"), (prime, "prime-rl"), (board, "rl-logging-board")]
    for k in range(max(6, MUTATIONS // 5)):
        source, fmt = sources[k % 3]
        op, data = mutate_bytes(source.read_bytes(), rng)
        path = tmp_path / f"m{k}.jsonl"
        path.write_bytes(data)
        check_import(base_store, path, f"{fmt} byte mutation ({op})", fmt=fmt)
        path.unlink()


def test_a_failing_case_of_every_profile_can_be_replayed():
    """The long loops once failed in one case of 9,556 and kept nothing to replay it with: every profile
    prints the failure's blob, and the long loops' profile keeps the example on disk for the next run."""
    for name in ("ci", "dev", "long"):
        assert settings.get_profile(name).print_blob, name
    kept = settings.get_profile("long").database
    assert isinstance(kept, DirectoryBasedExampleDatabase), kept
    assert kept.path == LONG_EXAMPLES_DB
