"""Uploads on the Runs page: whatever name the browser sends, the file is saved inside the upload folder."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

import backend.ingest
from app import access
from backend.core.uploads import safe_upload_path
from backend.store import Store
from tests.app.conftest import open_app
from tests.conftest import make_records

SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"
DEMO_RUN, DEMO_POLICY = SAMPLES / "demo_run.jsonl", SAMPLES / "demo-policy"
HOSTILE = ["../../etc/passwd", "..", "a/../../b.jsonl", "/etc/passwd", "..\\..\\x.jsonl", ".", ""]
# Names the uploader accepts (its type filter wants a .jsonl/.json/.parquet extension).
ACCEPTED = ["../../etc/passwd.jsonl", "a/../../b.jsonl", "../.jsonl", "..\\..\\w.jsonl"]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_name_stays_in_the_upload_directory(tmp_path, name):
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    target = safe_upload_path(uploads, name)
    assert target.parent == uploads.resolve()
    assert target.name not in ("", ".", "..")
    target.write_bytes(b"{}\n")  # a plain file, not a directory (`..` used to raise IsADirectoryError)
    assert target.is_file()


@pytest.mark.parametrize("name", ACCEPTED)
def test_upload_with_hostile_name_imports_from_inside_the_upload_folder(app_db, tmp_path, monkeypatch, name):
    temp_root = tmp_path / "tmp"
    temp_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp_root))
    seen = []
    real_import = backend.ingest.import_path

    def spy(store, target, *args, **kwargs):
        seen.append((target, target.is_file(), target.read_bytes() if target.is_file() else None))
        return real_import(store, target, *args, **kwargs)

    monkeypatch.setattr(backend.ingest, "import_path", spy)
    content = "".join(json.dumps(r) + "\n" for r in make_records(n_groups=1, group_size=2, seed=11)).encode()

    at = open_app(app_db, "runs")
    at.text_input(key="runs_import_name").set_value("uploaded").run()
    at.file_uploader(key="runs_import_upload").set_value((name, content, "application/jsonl")).run()
    at.button(key="runs_import_button").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]

    assert len(seen) == 1
    target, was_file, saved = seen[0]
    assert was_file and saved == content
    # saved directly inside the per-import temporary folder under our temp root, nowhere else
    assert target.resolve().parent.parent == temp_root.resolve()
    assert not [p for p in tmp_path.rglob("*.jsonl") if temp_root not in p.parents]
    assert any("imported 2 rollouts" in s.value for s in at.success), [s.value for s in at.success]
    assert "uploaded" in list(at.dataframe[0].value["name"])


def _demo_texts(n: int = 4) -> bytes:
    """Records of the bundled demo run without token ids or tokens (the importer must tokenize them)."""
    with open(DEMO_RUN) as fh:
        records = [json.loads(next(fh)) for _ in range(n)]
    keep = ("prompt", "response", "group", "step", "rewards")
    return "".join(json.dumps({k: r[k] for k in keep}) + "\n" for r in records).encode()


def _upload(at, filename: str, content: bytes, model: str = "") -> None:
    at.text_input(key="runs_import_name").set_value("uploaded").run()
    at.file_uploader(key="runs_import_upload").set_value((filename, content, "application/jsonl")).run()
    at.text_input(key="runs_import_model").set_value(model).run()
    at.button(key="runs_import_button").click().run()
    assert not at.exception, [e.message for e in at.exception]


def _tokens(db, run: str) -> list[list[str]]:
    with Store(db, read_only=True) as store:
        return [list(t) for t in store.load_batch(run).tokens]


def test_upload_with_a_model_folder_inside_the_roots_tokenizes_with_it(app_db, tmp_path, monkeypatch):
    root = tmp_path / "root"
    shutil.copytree(DEMO_POLICY, root / "policy")
    monkeypatch.setenv(access.ROOTS_ENV, str(root))
    at = open_app(app_db, "runs")
    _upload(at, "demo texts.jsonl", _demo_texts(), str(root / "policy"))
    assert not at.error, [e.value for e in at.error]
    table = at.dataframe[0].value.set_index("name")
    assert str((root / "policy").resolve()) in table.loc["uploaded", "model"]
    assert table.loc["oracle", "model"] == "–"  # a run without a model: a dash, not "None"
    tokens = _tokens(app_db, "uploaded")
    assert tokens[0][:6] == ["4", "+", "8", "=", "1", "2"]  # the policy's character tokenizer
    assert all(len(t) == 1 for row in tokens for t in row)


def test_a_model_folder_outside_the_roots_is_refused_and_nothing_is_written(app_db, tmp_path, monkeypatch):
    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.setenv(access.ROOTS_ENV, str(root))
    at = open_app(app_db, "runs")
    _upload(at, "demo.jsonl", _demo_texts(), str(DEMO_POLICY))
    (error,) = [e.value for e in at.error]
    assert "outside the folders this server reads from" in error and "nothing was written" in error
    # a model folder cannot be uploaded: the message says what can be done instead
    assert "upload" not in error and "move or link the model folder" in error, error
    assert "uploaded" not in list(at.dataframe[0].value["name"])


def test_an_upload_error_names_the_uploaded_file_not_a_temporary_path(app_db, tmp_path, monkeypatch):
    temp_root = tmp_path / "tmp"
    temp_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp_root))
    bad = _demo_texts(2) + b'{"prompt": "p", "response": "r", "rewards": {"task": "high"}}\n'
    at = open_app(app_db, "runs")
    _upload(at, "my rollouts.jsonl", bad)
    (error,) = [e.value for e in at.error]
    assert "my rollouts.jsonl" in error and "line 3" in error, error
    assert str(temp_root) not in error and "tmp" not in error.replace("my rollouts", ""), error
    # and without a model the same texts import with the simple tokenization (words, not characters)
    at = open_app(app_db, "runs")
    _upload(at, "demo.jsonl", _demo_texts())
    assert not at.error, [e.value for e in at.error]
    words = _tokens(app_db, "uploaded")[0]
    assert words[:3] == ["4", "+", "8"] and " carry" in words
