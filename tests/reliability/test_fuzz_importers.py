"""Bad input, fuzzed, through `creditlens import`: every importer, property-based and mutation-based.

Each case ends in a correct import or in exit 2 with one line naming file, line/record and field, and
the store's tables (row counts and a content checksum) exactly as before. pytest-timeout catches hangs.
"""

from __future__ import annotations

import json
import random
import subprocess

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from tests.backend.ingest.test_token_formats import (
    DEMO,
    byte_level_bpe,
    prime_rl_samples,
    write_board_files,
    write_nemo_rl_step,
    write_prime_rl_step,
)
from tests.conftest import make_records
from tests.reliability.conftest import (
    LONG,
    PYTHON,
    ROOT,
    assert_clean_error,
    instance_held,
    run_cli,
    store_digest,
    tally,
)
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

pytestmark = pytest.mark.timeout(120)

EXAMPLES = 400 if LONG else 20
MUTATIONS = 2000 if LONG else 60
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
@given(records=st.lists(native_record(), min_size=1, max_size=4), dup=st.booleans())
def test_native_records_fuzzed_as_jsonl_and_parquet(base_store, tmp_path_factory, records, dup):
    if dup:
        records = records + records[:1]  # duplicate records are legal: they become separate rollouts
    d = tmp_path_factory.mktemp("native")
    check_import(base_store, write_jsonl(d / "run.jsonl", records), "native jsonl (hypothesis)")
    parquet = try_write_parquet(d / "run.parquet", records)
    if parquet is not None:
        check_import(base_store, parquet, "native parquet (hypothesis)")


@FUZZ
@given(table=native_table())
def test_native_parquet_fast_path_fuzzed(base_store, tmp_path_factory, table):
    path = tmp_path_factory.mktemp("fast") / "run.parquet"
    pq.write_table(table, path)
    check_import(base_store, path, "native parquet typed (hypothesis)")


@FUZZ
@given(lines=st.lists(verl_line(), min_size=1, max_size=4), as_dir=st.booleans())
def test_verl_dumps_fuzzed(base_store, tmp_path_factory, lines, as_dir):
    d = tmp_path_factory.mktemp("verl")
    if as_dir:
        write_jsonl(d / "3.jsonl", lines)
        check_import(base_store, d, "verl dir (hypothesis)", fmt="verl")
    else:
        check_import(base_store, write_jsonl(d / "7.jsonl", lines), "verl file (hypothesis)", fmt="verl")


@FUZZ
@given(table=trl_table())
def test_trl_completions_fuzzed(base_store, tmp_path_factory, table):
    d = tmp_path_factory.mktemp("trl")
    (d / "completions").mkdir()
    pq.write_table(table, d / "completions" / "completions_00010.parquet")
    check_import(base_store, d, "trl (hypothesis)", fmt="trl")


# --- mutation -------------------------------------------------------------------------------------
def _valid_files(d):
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


def test_byte_mutations_of_jsonl_files(base_store, tmp_path):
    rng = random.Random(1)
    _, native, verl = _valid_files(tmp_path)
    for k in range(MUTATIONS):
        source, fmt = (native, "native") if k % 2 == 0 else (verl, "verl")
        op, data = mutate_bytes(source.read_bytes(), rng)
        path = tmp_path / f"m{k}.jsonl"
        path.write_bytes(data)
        check_import(base_store, path, f"{fmt} jsonl byte mutation ({op})", fmt=fmt)
        path.unlink()


def test_structural_mutations_of_records(base_store, tmp_path):
    rng = random.Random(2)
    records, _, _ = _valid_files(tmp_path)
    for k in range(MUTATIONS):
        bad = list(records)
        i = rng.randrange(len(bad))
        op, bad[i] = mutate_record(bad[i], rng)
        check_import(base_store, write_jsonl(tmp_path / f"s{k}.jsonl", bad), "native jsonl field mutation")
        if k % 3 == 0:
            parquet = try_write_parquet(tmp_path / f"s{k}.parquet", bad)
            if parquet is not None:
                check_import(base_store, parquet, "native parquet field mutation")


def test_byte_mutations_of_parquet_files(base_store, tmp_path):
    rng = random.Random(3)
    records = make_records(n_groups=4, group_size=4, seed=5)
    src = tmp_path / "run.parquet"
    pq.write_table(pa.Table.from_pylist(records), src, row_group_size=5, compression="none")
    trl_src = tmp_path / "trl.parquet"
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
    for k in range(MUTATIONS // 2):
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
            path = tmp_path / f"p{k}.parquet"
            path.write_bytes(bytes(data))
            check_import(base_store, path, f"{fmt} parquet byte mutation ({op})", fmt=fmt)
            path.unlink()


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
