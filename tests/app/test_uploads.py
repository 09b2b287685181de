"""Uploads on the Runs page: whatever name the browser sends, the file is saved inside the upload folder."""

from __future__ import annotations

import json
import tempfile

import pytest

import backend.ingest
from backend.uploads import safe_upload_path
from tests.app.conftest import open_app
from tests.conftest import make_records

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
