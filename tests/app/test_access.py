"""Path imports stay inside the import roots (after symlinks), errors never quote a file, the token
helpers and the `creditlens app` switches that set all this up."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from app import access, actions
from app.server import auth
from app.server import launch as commands
from backend.core.errors import InputError
from backend.store import StoreHandle
from tests.app.conftest import open_app, text_blocks
from tests.conftest import make_records, write_jsonl

SECRET = "hunter2-do-not-show"


@pytest.fixture
def layout(tmp_path, app_db):
    """An import root holding a good run, a folder outside it holding a secret, and links between."""
    root = tmp_path / "shared-runs"
    outside = tmp_path / "private"
    root.mkdir()
    outside.mkdir()
    write_jsonl(root / "good.jsonl", make_records(n_groups=1, group_size=2, seed=3))
    secret = outside / "secret.jsonl"
    secret.write_text(json.dumps({"prompt": SECRET, "response": SECRET, "rewards": {"task": SECRET}}) + "\n")
    (root / "link-to-secret.jsonl").symlink_to(secret)
    (root / "link-to-private").symlink_to(outside, target_is_directory=True)
    folder = root / "folder-with-link"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", make_records(n_groups=1, group_size=2, seed=4))
    (folder / "b.jsonl").symlink_to(secret)
    current = access.Settings(None, False, (root.resolve(),), access.DEFAULT_MAX_SUFFIXES)
    return {"root": root, "outside": outside, "secret": secret, "folder": folder, "settings": current}


def shown_text(at) -> str:
    """Every text element the page shows."""
    kinds = ("error", "warning", "info", "success", "markdown", "caption", "text", "exception")
    return "\n".join([str(e.value) for kind in kinds for e in getattr(at, kind)] + text_blocks(at))


def _runs(db: Path) -> list[str]:
    with StoreHandle(db).read() as store:
        return [r["name"] for r in store.list_runs()]


def test_a_path_inside_the_roots_imports(layout, app_db):
    report = actions.import_from_path(
        layout["settings"], StoreHandle(app_db), str(layout["root"] / "good.jsonl"), "ok"
    )
    assert "imported 2 rollouts" in report.message()
    assert "ok" in _runs(app_db)


@pytest.mark.parametrize(
    "path",
    [
        lambda lay: lay["secret"],  # plainly outside
        lambda lay: lay["root"] / ".." / "private" / "secret.jsonl",  # `..` out of the root
        lambda lay: lay["root"] / "link-to-secret.jsonl",  # a file link leading out
        lambda lay: lay["root"] / "link-to-private" / "secret.jsonl",  # a folder link leading out
        lambda lay: lay["root"] / "link-to-private",
        lambda lay: lay["folder"],  # a folder inside, holding a link that leads out
        lambda lay: Path("/etc/passwd"),
    ],
    ids=["outside", "dotdot", "file-link", "dir-link", "dir-link-itself", "folder-with-link", "etc-passwd"],
)
def test_a_path_outside_the_roots_is_refused_before_reading(layout, app_db, path):
    before = _runs(app_db)
    target = path(layout)
    with pytest.raises(access.Refused) as err:
        actions.import_from_path(layout["settings"], StoreHandle(app_db), str(target), "stolen")
    message = str(err.value)
    assert "outside the folders this server imports from" in message
    assert "--import-root" in message or "upload" in message
    assert SECRET not in message
    assert _runs(app_db) == before


def test_a_refused_path_says_nothing_about_whether_it_exists(layout):
    messages = []
    for name in ("secret.jsonl", "no-such-file.jsonl"):
        with pytest.raises(access.Refused) as err:
            access.import_path_allowed(layout["settings"], layout["outside"] / name)
        messages.append(str(err.value).replace(name, "NAME"))
    assert messages[0] == messages[1]


def test_import_errors_inside_the_roots_do_not_quote_the_file(layout, app_db):
    bad = layout["root"] / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "p", "response": "r", "rewards": {"task": SECRET}}) + "\n")
    with pytest.raises(InputError) as err:
        actions.import_from_path(layout["settings"], StoreHandle(app_db), str(bad), "bad")
    assert "line 1" in str(err.value) and "'rewards.task'" in str(err.value)
    assert "got a string" in str(err.value)
    assert SECRET not in str(err.value)


def test_default_roots_are_the_store_folder_and_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(access.ROOTS_ENV, raising=False)
    db = tmp_path / "stores" / "runs.duckdb"
    current = access.settings(db, argv=["main.py", "--db", str(db)])
    assert current.import_roots == ((tmp_path / "stores").resolve(), tmp_path.resolve())
    assert not current.read_only and current.token is None


def test_settings_travel_on_the_command_line_after_the_double_dash(tmp_path, monkeypatch):
    monkeypatch.delenv(access.READ_ONLY_ENV, raising=False)
    db = tmp_path / "runs.duckdb"
    args = commands.app_arguments(db, True, [tmp_path, tmp_path / "."], 64)
    assert args == ["--read-only", "--import-root", str(tmp_path.resolve()), "--max-suffixes", "64"]
    cmd = commands.streamlit_command(db, 8501, "0.0.0.0", args)
    assert cmd[cmd.index("--") + 1 :] == ["--db", str(db), *args]
    assert str(commands.SERVER) in cmd  # the app behind the token gate
    # a served tool: no watching of source files, no full garbage collection after every script run
    assert cmd[cmd.index("--server.fileWatcherType") + 1] == "none"
    assert cmd[cmd.index("--runner.postScriptGC") + 1] == "false"
    current = access.settings(db, argv=[str(commands.SERVER), "--db", str(db), *args])
    assert current.read_only and current.import_roots == (tmp_path.resolve(),) and current.max_suffixes == 64


def test_a_missing_default_root_is_skipped_with_a_line(tmp_path, monkeypatch, capsys):
    # a machine that never ran the app: the store's folder does not exist yet (it used to stop `make app`)
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "fresh-home" / ".creditlens" / "runs.duckdb"
    assert commands.app_arguments(db, False, None, None) == ["--import-root", str(tmp_path.resolve())]
    assert f"import root {db.parent}: no such folder, skipped" in capsys.readouterr().err
    # once the store exists, its folder is a root again
    with StoreHandle(db).write():
        pass
    assert commands.app_arguments(db, False, None, None) == [
        "--import-root",
        str(db.parent.resolve()),
        "--import-root",
        str(tmp_path.resolve()),
    ]


def test_a_missing_import_root_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match=r"--import-root .*nope: not a directory"):
        commands.app_arguments(tmp_path / "runs.duckdb", False, [tmp_path / "nope"], None)


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("192.168.1.20", False),
        ("gpu-box.example", False),
    ],
)
def test_loopback_addresses(host, loopback):
    assert auth.is_loopback(host) is loopback


def test_a_token_is_required_exactly_when_bound_beyond_loopback(monkeypatch):
    monkeypatch.delenv(access.TOKEN_ENV, raising=False)
    assert commands.access_token("127.0.0.1", None, False) == (None, False)
    token, generated = commands.access_token("0.0.0.0", None, False)
    assert generated and len(token) >= 32
    assert commands.access_token("0.0.0.0", None, False)[0] != token  # new for every start
    assert commands.access_token("0.0.0.0", "given", False) == ("given", False)
    monkeypatch.setenv(access.TOKEN_ENV, "from-env")
    assert commands.access_token("0.0.0.0", None, False) == ("from-env", False)
    assert commands.access_token("0.0.0.0", None, True) == (None, False)
    with pytest.raises(InputError, match="contradict"):
        commands.access_token("0.0.0.0", "given", True)


def test_token_and_cookie_comparisons():
    token = auth.new_token()
    assert auth.token_matches(token, token)
    assert not auth.token_matches(token[:-1], token)
    assert not auth.token_matches(token + "x", token)
    assert not auth.token_matches("", token) and not auth.token_matches(None, token)
    assert not auth.token_matches("\udcff", token)  # undecodable input is just wrong, not an error
    cookie = auth.cookie_value(token)
    assert token not in cookie and auth.cookie_matches(cookie, token)
    assert not auth.cookie_matches(auth.cookie_value(token + "x"), token)
    assert auth.cookie_name(8501) != auth.cookie_name(8502)


def test_runs_page_refuses_a_path_outside_the_roots_and_imports_one_inside(layout, app_db, monkeypatch):
    monkeypatch.setenv(access.ROOTS_ENV, str(layout["root"]))
    at = open_app(app_db, "runs")
    at.text_input(key="runs_import_name").set_value("stolen").run()
    at.radio(key="runs_import_source").set_value("path on this machine").run()
    assert any(str(layout["root"].resolve()) in c.value.replace("\\", "") for c in at.caption)
    for target in (layout["secret"], layout["root"] / "link-to-secret.jsonl"):
        at.text_input(key="runs_import_path").set_value(str(target)).run()
        at.button(key="runs_import_button").click().run()
        assert not at.exception, [e.message for e in at.exception]
        errors = [e.value for e in at.error]
        assert len(errors) == 1 and "outside the folders this server imports from" in errors[0], errors
        assert SECRET not in shown_text(at)
    assert "stolen" not in _runs(app_db)

    at.text_input(key="runs_import_name").set_value("shared").run()
    at.text_input(key="runs_import_path").set_value(str(layout["root"] / "good.jsonl")).run()
    at.button(key="runs_import_button").click().run()
    assert not at.error, [e.value for e in at.error]
    assert any("imported 2 rollouts" in s.value for s in at.success)
    assert "shared" in _runs(app_db)


def test_uploads_still_import_with_narrow_roots(tmp_path, app_db, monkeypatch):
    root = tmp_path / "only-here"
    root.mkdir()
    monkeypatch.setenv(access.ROOTS_ENV, str(root))
    content = "".join(json.dumps(r) + "\n" for r in make_records(n_groups=1, group_size=3, seed=8)).encode()
    at = open_app(app_db, "runs")
    at.text_input(key="runs_import_name").set_value("uploaded").run()
    at.file_uploader(key="runs_import_upload").set_value(
        ("rollouts.jsonl", content, "application/jsonl")
    ).run()
    at.button(key="runs_import_button").click().run()
    assert not at.error, [e.value for e in at.error]
    assert "uploaded" in _runs(app_db)
    assert os.listdir(root) == []


def test_the_script_itself_shows_nothing_without_the_access_cookie(app_db, monkeypatch):
    """The gate's backstop when main.py is served without app/server/asgi.py: no cookie, no views."""
    monkeypatch.setenv(access.TOKEN_ENV, "some-token")
    at = open_app(app_db, query={"run": "demo", "rollout": "1"})
    assert [t.value for t in at.title] == ["Credit Lens · access token required"]
    assert not at.get("plotly_chart") and not at.sidebar.selectbox
    assert "demo" not in shown_text(at)


def test_printed_urls_carry_the_token_intact():
    token = "a&b#c d/é"
    urls = commands._urls("0.0.0.0", 8501, token)
    assert urls[0].startswith("http://127.0.0.1:8501/?token=")
    assert all(parse_qs(urlsplit(u).query)["token"] == [token] for u in urls)
    assert commands._urls("192.168.1.20", 8502, None) == ["http://192.168.1.20:8502/"]
