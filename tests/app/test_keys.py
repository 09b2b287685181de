"""Every URL query parameter and `st.session_state` key the app reads back is named in app/keys.py, and the
code uses the name: no module of app/ reads or writes one by a string of its own."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from app import keys

APP = Path(__file__).resolve().parents[2] / "app"
STATE = ("session_state", "query_params")
URL_HELPERS = ("url_value", "publish", "link_warning")  # app.state's: the first argument is a URL parameter


def _named() -> dict[str, str]:
    """app/keys.py's constants: name -> the parameter or key."""
    return {k: v for k, v in vars(keys).items() if k.isupper() and isinstance(v, str)}


def _literal(node: ast.AST | None) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def _is_state(node: ast.AST) -> bool:
    """`st.session_state` or `st.query_params` (any `x.session_state`, `x.query_params`)."""
    return isinstance(node, ast.Attribute) and node.attr in STATE


def _literal_dict_keys(node: ast.AST) -> bool:
    return any(isinstance(d, ast.Dict) and any(_literal(k) for k in d.keys) for d in ast.walk(node))


def _call_literals(node: ast.Call, named: set[str]) -> list[str]:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = node.args[0] if node.args else None
    found = []
    if isinstance(func, ast.Attribute) and name in ("get", "pop", "setdefault") and _is_state(func.value):
        found += [f"reads {ast.unparse(node)}"] if _literal(first) else []
    if name in URL_HELPERS and _literal(first):
        found.append(f"names a URL parameter: {ast.unparse(node)}")
    if name == "from_dict" and _is_state(func.value) and first is not None and _literal_dict_keys(first):
        found.append(f"writes the URL: {ast.unparse(node)}")
    for kw in node.keywords:
        if kw.arg == "url" and _literal(kw.value):
            found.append(f"mirrors a widget to the URL: url={ast.unparse(kw.value)}")
        if kw.arg == "query_params" and _literal_dict_keys(kw.value):
            found.append(f"links with query_params={ast.unparse(kw.value)}")
        if kw.arg == "key" and isinstance(kw.value, ast.Constant) and kw.value.value in named:
            found.append(f"keys a widget by the string of a named key: key={kw.value.value!r}")
    return found


def literal_keys(source: str, filename: str = "<source>") -> list[str]:
    """Where `source` names a URL parameter or a session key by a string (or f-string) of its own."""
    named = set(_named().values())
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        what = []
        if isinstance(node, ast.Subscript) and _is_state(node.value) and _literal(node.slice):
            what = [f"indexes {ast.unparse(node)}"]
        elif isinstance(node, ast.Call):
            what = _call_literals(node, named)
        elif (
            isinstance(node, ast.Compare)
            and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
            and any(_is_state(c) for c in node.comparators)
            and _literal(node.left)
        ):
            what = [f"tests {ast.unparse(node)}"]
        found += [f"{filename}:{node.lineno} {w}" for w in what]
    return found


def test_the_app_names_every_url_parameter_and_session_key_from_app_keys():
    found = []
    for path in sorted(APP.rglob("*.py")):
        if path != APP / "keys.py":
            found += literal_keys(path.read_text(), str(path.relative_to(APP.parent)))
    assert not found, "name these in app/keys.py and use the name:\n" + "\n".join(found)


def test_the_check_finds_every_kind_of_literal():
    bad = """
st.session_state["x"] = 1
st.session_state.get(f"y_{n}")
st.session_state.pop("z", None)
st.query_params.get("where")
st.query_params["run"] = run
if "flash" in st.session_state: pass
state.url_value("diff")
state.publish("zlock", None)
state.link_warning("run", 1, "why", "what")
st.query_params.from_dict({"run": run})
state.url_widget(st.radio, "Mode", key=keys.TUNE_REPLAY_MODE, url="mode")
st.page_link(page, query_params={"run": run})
st.number_input("Page", key="explorer_page_no")
"""
    assert len(literal_keys(bad)) == 13, literal_keys(bad)
    good = """
st.session_state[keys.RUN] = 1
st.session_state.get(keys.tune_beta(c))
if keys.RUNS_FLASH in st.session_state: pass
state.url_widget(st.radio, "Mode", key=keys.TUNE_REPLAY_MODE, url=keys.URL_REPLAY_MODE)
st.button("Delete", key="runs_delete_button")  # a button: nothing reads it back
"""
    assert literal_keys(good) == []


def test_each_parameter_and_key_has_one_name():
    counts = Counter(_named().values())
    assert not [v for v, n in counts.items() if n > 1], counts


def test_the_key_families_give_the_strings_links_and_sessions_hold():
    """The families are templates (`"beta_{}".format`); bookmarks and AppTests hold the strings they give."""
    assert keys.url_field("gae", "lam") == "gae.lam"
    assert [keys.url_beta("task"), keys.url_normalization("task"), keys.url_tau("task")] == [
        "beta_task",
        "norm_task",
        "tau_task",
    ]
    assert [keys.kept("w"), keys.restored("w"), keys.click_seen("heat")] == [
        "_keep_w",
        "_restored_w",
        "_heat_seen",
    ]
    assert keys.form_field("explorer_cfg", "gae", "lam") == "explorer_cfg_gae_lam"
    widgets = [keys.channel_picker, keys.scale_mode, keys.scale_lock, keys.scale_lock_toggle]
    assert [key("rollout") for key in widgets] == [
        "rollout_channel",
        "rollout_scale",
        "rollout_zlock",
        "rollout_lock_toggle",
    ]
    tune = [keys.tune_beta("task"), keys.tune_normalization("task"), keys.tune_tau("task")]
    assert tune == ["tune_beta_task", "tune_norm_task", "tune_tau_task"]
