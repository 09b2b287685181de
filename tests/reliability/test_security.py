"""Security: parameterized SQL (hostile run names), no SQL built from user data, no streamlit in the
backend, upload names that cannot escape, model loading that refuses pickle and remote code, and a
server bound to 127.0.0.1 by default."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.server import launch as serve
from backend.core.errors import InputError
from backend.core.uploads import safe_upload_path
from backend.ingest import import_records
from backend.models import loading
from backend.store import Store, StoreHandle
from backend.store.explorer_queries import _alias
from backend.views import explorer
from tests.conftest import make_records
from tests.reliability.conftest import ROOT, long_budget, run_cli, tally
from tests.reliability.fuzzing import write_jsonl

BACKEND = ROOT / "backend"
HOSTILE_NAMES = [
    "it's",
    'say "hi"',
    "a; b",
    "'; DROP TABLE runs; --",
    '"); DELETE FROM rollouts; --',
    "run\\with\\backslashes",
    "名前 with ünïcode",
    "%s %d {} ?",
    "-- comment",
]


def test_hostile_run_names_import_list_and_delete_exactly(tmp_path):
    db = tmp_path / "runs.duckdb"
    src = write_jsonl(tmp_path / "r.jsonl", make_records(n_groups=1, group_size=2))
    for name in HOSTILE_NAMES:
        assert run_cli(["import", src, "--db", db, "--run", name, "--quiet"]).rc == 0, name
    listed = json.loads(run_cli(["runs", "--db", db, "--json"]).out)
    assert [r["name"] for r in listed] == HOSTILE_NAMES and all(r["rollouts"] == 2 for r in listed)
    for k, name in enumerate(HOSTILE_NAMES):
        assert run_cli(["delete", "--db", db, "--run", name]).rc == 0, name
        left = [r["name"] for r in json.loads(run_cli(["runs", "--db", db, "--json"]).out)]
        assert left == HOSTILE_NAMES[k + 1 :]
        tally("security: hostile run names", "imported, listed, deleted exactly")
    missing = run_cli(["delete", "--db", db, "--run", "'; DROP TABLE runs; --"])
    assert missing.rc == 2 and "no run named" in missing.err


def _py_files(root: Path):
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def test_backend_never_imports_streamlit():
    offenders = []
    for path in _py_files(BACKEND):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            if any(n == "streamlit" or n.startswith("streamlit.") for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


SQL_WORDS = re.compile(r"\b(SELECT|INSERT|DELETE|UPDATE|WHERE|FROM|DROP|CREATE)\b")
# Interpolations allowed inside SQL f-strings: names that come from constants in backend/store, never from
# a caller (table names from a fixed tuple, column lists of an Arrow table we built, `?` placeholders).
# (`sets` is built from names checked against PER_TOKEN_FIELDS in Store.update_token_arrays.)
ALLOWED_INTERPOLATIONS = {"table", "columns", "view", "cond", "column", "sets"}
# The Explorer's and Trends' query builders compose their SQL from fragments, each made there of
# `_alias()`-checked identifiers ([a-z_][a-z0-9_]*, else ValueError), integer list indexes, operators from a
# fixed tuple and constants; every value (run, estimator, channel, class names, bounds, search text) is a
# `?` parameter (test_explorer_sql_keeps_hostile_names_as_data checks it end to end).
# The monitors' queries compose the same way: `where` is `_credit_where`'s constant text (values are `?`),
# `parts` are constant expressions over integer list indexes.
FRAGMENT_BUILDERS = {
    "backend/store/explorer_queries.py",
    "backend/store/trend_queries.py",
    "backend/store/monitor_queries.py",
}
FRAGMENTS = {
    "sql",
    "parts",
    "', '.join(cols)",
    "', '.join(select)",
    "' '.join(parts)",
    "score_select",
    "shares",
    "excess",
    "qsel",
    "joins",
    "cond",
    "order('t')",
    "order('hits')",
    "page",
    "list(QUANTILES)",
    "_alias(n)",
    "select",
    "metrics",
    "where",
    "', '.join(parts)",
}


def _module_constants(tree: ast.Module) -> set[str]:
    """Upper-case module-level names bound once to text written in the module (a string, or an f-string of
    such names): SQL pieces and patterns that no caller can reach."""
    bound: dict[str, int] = {}
    constant = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            bound[name] = bound.get(name, 0) + 1
            value = node.value
            text = isinstance(value, ast.Constant) and isinstance(value.value, str)
            composed = isinstance(value, ast.JoinedStr) and all(
                isinstance(v, ast.Constant)
                or (
                    isinstance(v, ast.FormattedValue)
                    and isinstance(v.value, ast.Name)
                    and v.value.id in constant
                )
                for v in value.values
            )
            if name.lstrip("_").isupper() and (text or composed):
                constant.add(name)
    return {name for name in constant if bound[name] == 1}


def test_sql_is_never_built_from_user_data():
    problems = []
    # constants of the store's modules, also where another store module imports them
    store_files = _py_files(BACKEND / "store")
    constants = set().union(*(_module_constants(ast.parse(p.read_text())) for p in store_files))
    for path in _py_files(BACKEND):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.JoinedStr):
                continue
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            if not SQL_WORDS.search(text) or not re.search(r"\b(FROM|INTO|TABLE|SET)\b", text):
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if path.parent.name != "store" and "store" not in path.parts:
                problems.append(f"{where}: SQL outside backend/store")
            for value in node.values:
                if isinstance(value, ast.FormattedValue):
                    expr = ast.unparse(value.value)
                    fragment = str(path.relative_to(ROOT)) in FRAGMENT_BUILDERS and expr in FRAGMENTS
                    if expr not in ALLOWED_INTERPOLATIONS and expr not in constants and not fragment:
                        problems.append(f"{where}: SQL f-string interpolates {expr!r}")
    assert not problems, "\n".join(problems)


def test_store_insert_refuses_unknown_tables(tmp_path):
    with Store(tmp_path / "s.duckdb") as store, pytest.raises(ValueError, match="not an insertable table"):
        store.insert_arrow("runs; DROP TABLE runs", pa.table({"x": [1]}))


# --- uploads ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, expected",
    [
        ("run.jsonl", "run.jsonl"),
        ("../../etc/passwd", "passwd"),
        ("..\\..\\windows\\run.parquet", "run.parquet"),
        ("/abs/path/x.jsonl", "x.jsonl"),
        ("..", "upload"),
        (".", "upload"),
        ("", "upload"),
        (".hidden.jsonl", "hidden.jsonl"),
        ("a\x00b.jsonl", "ab.jsonl"),
        ("my run (1).jsonl", "my_run_1_.jsonl"),
        ("x" * 5000 + ".parquet", "x" * 112 + ".parquet"),
    ],
)
def test_upload_names_stay_inside_the_directory(tmp_path, name, expected):
    path = safe_upload_path(tmp_path, name)
    assert path.parent == tmp_path.resolve() and path.name == expected
    tally("security: upload names", "kept inside the upload directory")


@settings(max_examples=long_budget(300, 60), deadline=None)
@given(name=st.text(alphabet=st.sampled_from("./\\.\x00:~$ab-_ é😀"), max_size=40) | st.text(max_size=40))
def test_upload_names_fuzzed(tmp_path_factory, name):
    directory = tmp_path_factory.getbasetemp() / "uploads"
    directory.mkdir(exist_ok=True)
    path = safe_upload_path(directory, name)
    assert path.parent == directory.resolve()
    assert path.name not in ("", ".", "..") and not path.name.startswith(".")
    path.write_bytes(b"x")  # a real file can be written there
    path.unlink()
    tally("security: upload names (hypothesis)", "kept inside the upload directory")


def test_upload_into_a_symlink_pointing_out_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    (uploads / "evil.jsonl").symlink_to(outside / "target.jsonl")
    with pytest.raises(InputError, match="cannot be saved"):
        safe_upload_path(uploads, "evil.jsonl")


# --- models and server -----------------------------------------------------------------------------
def test_model_loading_refuses_pickle_remote_code_and_urls(tmp_path):
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    with pytest.raises(InputError, match="pickle"):
        loading.check_model_dir(pickled)
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "config.json").write_text(json.dumps({"model_type": "x", "auto_map": {"AutoModel": "m.M"}}))
    (remote / "model.safetensors").write_bytes(b"")
    with pytest.raises(InputError, match="remote code"):
        loading.check_model_dir(remote)
    with pytest.raises(InputError, match="URL"):
        loading.check_model_dir("https://example.com/model")
    # the same rules through the command line: one line, exit 2
    db = tmp_path / "runs.duckdb"
    bare = [{k: v for k, v in r.items() if k not in ("logprobs", "entropies")} for r in make_records(1, 2)]
    src = write_jsonl(tmp_path / "r.jsonl", bare)
    assert run_cli(["import", src, "--db", db, "--run", "r", "--quiet"]).rc == 0
    result = run_cli(["score", "--db", db, "--run", "r", "--model", pickled])
    assert result.rc == 2 and "pickle" in result.err and "Traceback" not in result.err, result.err
    tally("security: model loading", "pickle, remote code and URLs refused")


def test_server_binds_localhost_by_default():
    args = serve.build_parser().parse_args([])
    assert args.host == "127.0.0.1"
    cmd = serve.streamlit_command(Path("x.duckdb"), 8501)
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    tally("security: server bind address", "127.0.0.1 by default")


def test_explorer_sql_keeps_hostile_names_as_data(tmp_path):
    hostile = "x'); DROP TABLE runs; --"
    records = make_records(n_groups=2, group_size=3)
    for rec in records:
        rec["rewards"][hostile] = 1.0
        rec["response"] += hostile
    with Store(tmp_path / "s.duckdb") as store:
        import_records(store, hostile, records, content_key="hostile-sql")
    handle = StoreHandle(tmp_path / "s.duckdb")
    page = explorer.rollout_table(
        handle, hostile, explorer.ExplorerQuery(estimator="grpo", search=hostile, limit=None)
    )
    assert page.total == 6 and "score_x_drop_table_runs" in page.columns
    assert explorer.step_trends(handle, hostile, "grpo")["score_x_drop_table_runs"].tolist() == [1.0]
    with handle.read() as store:
        assert store.has_run(hostile)
    for bad in (hostile, 'a"b', "A", "1x", "x y"):
        with pytest.raises(ValueError):
            _alias(bad)
