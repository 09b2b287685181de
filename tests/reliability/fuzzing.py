"""Fuzz inputs for the importers: hypothesis strategies, byte/structure mutators and the case check.

Every case goes through the real command line (`creditlens import`) into a store that already holds a
run; the contract checked is the one in docs/reliability.md: either a correct import, or exit code 2
with one line naming the file, the line/record and the field, and the store exactly as before.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from backend.store import Store
from tests.reliability.conftest import assert_clean_error, run_cli, store_digest, tally

HUGE_INT = 10**400
SURROGATES = ["\ud800", "a\udfffb", "\udc80"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.just(HUGE_INT),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([3.5e38, -1e300, 1e-320]),
    st.text(max_size=6),
    st.sampled_from(SURROGATES),
)
garbage = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)
good_float = st.floats(min_value=-50, max_value=50, allow_nan=False)


def _maybe(draw, valid, absent_ok: bool = True):
    """Mostly the valid value; sometimes garbage; sometimes absent (returns the sentinel `...`)."""
    choice = draw(st.sampled_from(["valid"] * 5 + ["garbage"] + (["absent"] if absent_ok else [])))
    if choice == "valid":
        return draw(valid) if isinstance(valid, st.SearchStrategy) else valid
    if choice == "garbage":
        return draw(garbage)
    return ...


@st.composite
def native_record(draw) -> dict:
    n = draw(st.integers(0, 6))
    ids = draw(st.lists(st.integers(0, 1000), min_size=n, max_size=n))
    # per-token lists: right length, or off by one (the classic mismatch)
    per_token_len = st.sampled_from([n] * 4 + [max(n - 1, 0), n + 1])
    rec = {
        "prompt": _maybe(draw, st.text(max_size=12), absent_ok=True),
        "response": _maybe(draw, st.text(max_size=12), absent_ok=True),
        "token_ids": _maybe(draw, st.just(ids)),
        "rewards": _maybe(
            draw, st.dictionaries(st.sampled_from(["task", "format", "style"]), good_float, min_size=1)
        ),
        "step": _maybe(draw, st.integers(0, 5)),
        "group": _maybe(draw, st.one_of(st.integers(0, 3), st.text(max_size=3))),
        "meta": _maybe(draw, st.dictionaries(st.text(max_size=4), scalars, max_size=2)),
    }
    for name in ("logprobs", "entropies"):
        length = draw(per_token_len)
        rec[name] = _maybe(draw, st.lists(good_float, min_size=length, max_size=length))
    length = draw(per_token_len)
    rec["tokens"] = _maybe(draw, st.lists(st.text(max_size=3), min_size=length, max_size=length))
    length = draw(per_token_len)
    rec["token_rewards"] = _maybe(
        draw, st.fixed_dictionaries({"style": st.lists(good_float, min_size=length, max_size=length)})
    )
    return {k: v for k, v in rec.items() if v is not ...}


@st.composite
def verl_line(draw) -> dict:
    rec = {
        "input": _maybe(draw, st.text(max_size=10)),
        "output": _maybe(draw, st.text(max_size=10)),
        "score": _maybe(draw, st.one_of(good_float, st.booleans())),
        "step": _maybe(draw, st.integers(0, 3)),
        "gts": _maybe(draw, st.one_of(st.text(max_size=4), st.lists(st.integers(), max_size=2))),
        "acc": _maybe(draw, st.booleans()),
        "extra_info": _maybe(draw, garbage),
    }
    return {k: v for k, v in rec.items() if v is not ...}


def _column(draw, n: int, kind: str) -> pa.Array:
    """One Parquet column of `n` rows for a TRL/native file: a typed array, valid or not."""
    floats_odd = st.one_of(good_float, st.sampled_from([float("nan"), float("inf"), 1e300]), st.none())
    if kind == "text":
        t = draw(st.sampled_from(["str", "str", "str", "int", "null", "list"]))
        if t == "str":
            return pa.array(draw(st.lists(st.text(max_size=8), min_size=n, max_size=n)), pa.string())
        if t == "int":
            return pa.array(draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n)), pa.int64())
        if t == "list":
            return pa.array([[{"role": "user", "content": "hi"}]] * n)
        return pa.array([None] * n, pa.string())
    if kind == "step":
        t = draw(st.sampled_from(["int", "int", "float", "str", "big"]))
        if t == "int":
            return pa.array(draw(st.lists(st.integers(0, 9), min_size=n, max_size=n)), pa.int64())
        if t == "float":
            return pa.array(draw(st.lists(floats_odd, min_size=n, max_size=n)), pa.float64())
        if t == "big":
            return pa.array([2**40] * n, pa.int64())
        return pa.array(["x"] * n, pa.string())
    if kind == "reward":
        t = draw(st.sampled_from(["float", "float", "bool", "int", "str"]))
        if t == "float":
            return pa.array(draw(st.lists(floats_odd, min_size=n, max_size=n)), pa.float64())
        if t == "bool":
            return pa.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), pa.bool_())
        if t == "int":
            return pa.array(draw(st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n)), pa.int64())
        return pa.array(["1.0"] * n, pa.string())
    raise ValueError(kind)


@st.composite
def trl_table(draw) -> pa.Table:
    n = draw(st.integers(0, 5))
    columns = {"prompt": _column(draw, n, "text"), "completion": _column(draw, n, "text")}
    if draw(st.booleans()):
        columns["step"] = _column(draw, n, "step")
    for k in range(draw(st.integers(0, 2))):
        columns[f"reward_{k}"] = _column(draw, n, "reward")
    if draw(st.booleans()):
        columns["advantage"] = _column(draw, n, "reward")
    for name in draw(st.sets(st.sampled_from(list(columns)), max_size=1)):
        del columns[name]
    return pa.table(columns) if columns else pa.table({"x": pa.array([1] * n)})


@st.composite
def native_table(draw) -> pa.Table:
    """Typed native Parquet columns with `token_ids` (the vectorized fast path), valid or not."""
    n = draw(st.integers(1, 6))
    lengths = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    ids = [[(i * 7 + j) % 97 for j in range(L)] for i, L in enumerate(lengths)]
    floats_odd = st.one_of(good_float, st.sampled_from([float("nan"), float("-inf"), 1e300]))
    columns = {"prompt": _column(draw, n, "text"), "response": _column(draw, n, "text")}
    id_kind = draw(st.sampled_from(["int32", "int64", "int64", "large", "huge", "null", "float"]))
    if id_kind == "huge":
        ids[0] = ids[0] + [2**40]
        lengths[0] += 1
    if id_kind == "null":
        ids[0] = None
    columns["token_ids"] = {
        "int32": lambda: pa.array(ids, pa.list_(pa.int32())),
        "int64": lambda: pa.array(ids, pa.list_(pa.int64())),
        "huge": lambda: pa.array(ids, pa.list_(pa.int64())),
        "null": lambda: pa.array(ids, pa.list_(pa.int64())),
        "large": lambda: pa.array(ids, pa.large_list(pa.int64())),
        "float": lambda: pa.array(ids, pa.list_(pa.float64())),
    }[id_kind]()
    for name in draw(st.sets(st.sampled_from(["logprobs", "entropies", "values", "tokens"]), max_size=3)):
        rows = []
        for L in lengths:
            m = draw(st.sampled_from([L, L, L, L + 1, max(L - 1, 0)]))
            if name == "tokens":
                rows.append([f"t{j}" for j in range(m)])
            else:
                rows.append(draw(st.lists(floats_odd, min_size=m, max_size=m)))
        columns[name] = pa.array(rows)
    reward_kind = draw(st.sampled_from(["struct", "struct", "struct_null", "struct_str", "map", "float"]))
    scores = draw(st.lists(floats_odd, min_size=n, max_size=n))
    if reward_kind == "struct":
        columns["rewards"] = pa.array([{"task": s} for s in scores])
    elif reward_kind == "struct_null":
        struct = pa.struct([("task", pa.float64())])
        columns["rewards"] = pa.array([None] + [{"task": s} for s in scores[1:]], struct)
    elif reward_kind == "struct_str":
        columns["rewards"] = pa.array([{"task": str(s)} for s in scores])
    elif reward_kind == "map":
        columns["rewards"] = pa.array([[("task", s)] for s in scores], pa.map_(pa.string(), pa.float64()))
    else:
        columns["rewards"] = pa.array(scores, pa.float64())
    if draw(st.booleans()):
        columns["step"] = _column(draw, n, "step")
    if draw(st.booleans()):
        columns["group"] = draw(
            st.sampled_from(
                [pa.array(["a"] * n), pa.array(list(range(n))), pa.array([1.5] * n), pa.array([[1]] * n)]
            )
        )
    if draw(st.booleans()):
        columns["meta"] = draw(
            st.sampled_from([pa.array(['{"a": 1}'] * n), pa.array(["nope"] * n), pa.array([{"k": 1}] * n)])
        )
    if draw(st.booleans()):
        style = [[0.0] * (L - draw(st.sampled_from([0, 0, 1]))) for L in lengths]
        columns["token_rewards"] = pa.array([{"style": s} for s in style])
    return pa.table(columns)


# --- writing files ------------------------------------------------------------------------------
def write_jsonl(path: Path, records: list) -> Path:
    """`ensure_ascii` keeps lone surrogates as \\udXXX escapes, the way other tools emit them."""
    with open(path, "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, allow_nan=True) + "\n")
    return path


def try_write_parquet(path: Path, records: list[dict]) -> Path | None:
    """The same records as native Parquet, when Arrow can type them (mixed garbage often cannot)."""
    try:
        pq.write_table(pa.Table.from_pylist(records), path)
    except (pa.ArrowException, OverflowError, TypeError, ValueError, UnicodeEncodeError):
        return None
    return path


# --- the check ------------------------------------------------------------------------------------
_digests: dict[Path, dict] = {}  # the store's digest after the last case (it must not move)


def check_import(
    db: Path,
    path: Path,
    kind: str,
    fmt: str | None = None,
    expect: str | None = None,
    records: int | None = None,
) -> str:
    """Import `path` as run 'fuzz'; assert the contract; leave the store as it was. Returns the outcome."""
    before = _digests.get(db) or store_digest(db)
    args = ["import", path, "--db", db, "--run", "fuzz", "--quiet"] + (["--format", fmt] if fmt else [])
    result = run_cli(args)
    assert "Traceback" not in result.err + result.out, result.err
    if result.rc == 0:
        outcome = "imported"
        with Store(db) as store:
            index = store.rollout_index("fuzz")
            assert len(index) > 0 and index["rollout_id"].tolist() == list(range(len(index)))
            if records is not None:
                assert len(index) == records
            store.load_batch("fuzz", group_ids=[int(index["group_id"].iloc[0])]).validate()
            store.delete_run("fuzz")
    else:
        assert_clean_error(result, path)
        outcome = "clean error"
    after = _digests[db] = store_digest(db)
    assert after == before, f"store changed by a {outcome}: {path}"
    tally(kind, outcome)
    if expect is not None:
        assert outcome == expect, (outcome, expect, result.err)
    return outcome


# --- mutators ---------------------------------------------------------------------------------------
def mutate_bytes(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    op = rng.choice(["truncate", "flip", "invalid_utf8", "drop_line", "dup_line", "insert_garbage", "splice"])
    if not data:
        return op, data
    i = rng.randrange(len(data))
    if op == "truncate":
        return op, data[:i]
    if op == "flip":
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(len(b))
            b[k] = rng.randrange(256)
        return op, bytes(b)
    if op == "invalid_utf8":
        bad = rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"])
        return op, data[:i] + bad + data[i:]
    lines = data.split(b"\n")
    k = rng.randrange(len(lines))
    if op == "drop_line":
        return op, b"\n".join(lines[:k] + lines[k + 1 :])
    if op == "dup_line":
        return op, b"\n".join(lines[: k + 1] + [lines[k]] + lines[k + 1 :])
    if op == "insert_garbage":
        junk = rng.choice([b"{", b"]]]", b"null", b'{"prompt": ', b"[" * 5000, b"\x00", b"NaN", b"1e9999"])
        return op, data[:i] + junk + data[i:]
    j = rng.randrange(len(data))  # splice: a piece of the file pasted elsewhere
    return op, data[:i] + data[min(i, j) : max(i, j)][:200] + data[i:]


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for k, v in enumerate(obj[:8]):
            yield from _paths(v, prefix + (k,))


def mutate_record(rec: dict, rng: random.Random) -> tuple[str, dict]:
    """Replace, drop, shorten or lengthen one value somewhere inside a record."""
    rec = json.loads(json.dumps(rec))
    paths = [p for p in _paths(rec) if p]
    path = rng.choice(paths)
    parent = rec
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    op = rng.choice(["replace", "replace", "drop", "shorten", "lengthen", "wrap"])
    value = parent[key]
    if op == "drop":
        del parent[key]
    elif op == "shorten" and isinstance(value, list) and value:
        parent[key] = value[:-1]
    elif op == "lengthen" and isinstance(value, list):
        parent[key] = value + value[-1:] if value else [0.5]
    elif op == "wrap":
        parent[key] = [value]
    else:
        op = "replace"
        parent[key] = rng.choice(
            [
                None,
                True,
                "x",
                10**400,
                float("nan"),
                float("inf"),
                -1,
                2**40,
                1e300,
                [],
                {},
                [[1]],
                {"a": [1]},
                "\ud800",
                0.5,
            ]
        )
    return f"{op} {'.'.join(map(str, path))}", rec
