"""Shared selection (run, rollout) and the URL.

The selected run and rollout live in `st.session_state[keys.RUN]` / `[keys.ROLLOUT]`, set only
here, and are mirrored into the query string on every rerun (`?run=NAME&rollout=ID`), together with
the current view's own choices (`url_widget`). A fresh session (a bookmark, a shared link) reads
them back from the URL once. A link value that cannot be honoured (an unknown run, a rollout the run
does not have, an option that does not exist, a number out of range) is not dropped silently: the view
shows a warning naming the parameter and what it shows instead (`link_warning`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from app import data, keys, navigation
from app.ui.text import plain
from backend.core.errors import InputError
from backend.credit import main_channel, token_classes
from backend.views.explorer import parse_where

DEFAULT_RUN = "demo"


@dataclass(frozen=True)
class Selection:
    db: str
    run: str | None
    rollout: int | None
    group: int | None
    classes: tuple = token_classes.DEFAULT_CLASSES  # the token classes in effect (`resolve_classes`)


def _initial_url() -> dict[str, str]:
    if keys.URL_AT_START not in st.session_state:
        st.session_state[keys.URL_AT_START] = {k: st.query_params.get(k) for k in st.query_params}
    return st.session_state[keys.URL_AT_START]


def capture_live_url() -> None:
    """Keep the query string this script run was asked with, before `init_selection` rewrites the URL: a
    link followed within the session (`st.page_link`, `st.switch_page` with query parameters) carries
    parameters a view reads once (the Explorer's `where`)."""
    st.session_state[keys.URL_LIVE] = st.query_params.to_dict()


def live_url() -> dict[str, str]:
    """The query string this script run was asked with (`capture_live_url`)."""
    return st.session_state.get(keys.URL_LIVE, {})


def live_value(name: str) -> str | None:
    """`?name=` as this script run was asked for it, else None."""
    return live_url().get(name)


def link_warning(name: str, value: Any, reason: str, fallback: Any) -> None:
    """Say, once per session and parameter, that the link's `?name=value` cannot be honoured and why."""
    seen = st.session_state.setdefault(keys.LINK_WARNED, set())
    if name in seen:
        return
    seen.add(name)
    box = st.session_state.get(keys.LINK_BOX) or st
    box.warning(
        f"Link parameter {_code(f'{name}={value}')} cannot be honoured: {plain(reason)}. "
        f"Showing {plain(fallback)} instead."
    )


def name_unknown_view(views: dict[str, str], shown: str, also: tuple[str, ...] = ()) -> None:
    """A path that names no view (`/rollot?run=demo`): Streamlit runs the landing view instead; say so at the
    top of the page, naming the path asked for and the views there are (`views`: url path -> title; `also`:
    paths served but not listed)."""
    asked = getattr(getattr(get_script_run_ctx(), "pages_manager", None), "intended_page_name", None)
    if not asked or asked in views or asked in also:
        return
    listed = ", ".join(f"{_code('/' + path)} ({plain(title)})" for path, title in views.items())
    (st.session_state.get(keys.LINK_BOX) or st).warning(
        f"There is no view at {_code('/' + asked)}: showing the {plain(shown)} instead. The views: {listed}."
    )


def end_run() -> None:
    """When a script run ends (the entry point, `stop`): name the link's parameters the view dropped (the
    session's first run) and write what the run published into the URL."""
    name_dropped_parameters(st.session_state.get(keys.VIEW_SHOWN, "this"))
    flush_url()


def stop() -> NoReturn:
    """`st.stop` for a view: the run's URL is written first. After `st.stop` nothing more reaches the
    browser (each later message raises the stop again), a write of the URL included."""
    end_run()
    st.stop()


def name_dropped_parameters(view: str) -> None:
    """Once per session, when its first run ends: name the link's parameters that the view shown (`view`, its
    title) neither uses nor keeps in the address (`?runs=` on a view of one run, a parameter of another view
    after a mistyped path); those it could not honour were named already (`link_warning`)."""
    if st.session_state.get(keys.LINK_DROPS_NAMED):
        return
    st.session_state[keys.LINK_DROPS_NAMED] = True
    pending = st.session_state.get(keys.URL_PENDING) or {"replace": None, "set": {}}
    if pending["replace"] is None:  # the URL is kept as it is
        return
    kept = set(pending["replace"]) | set(pending["set"])  # written, or removed on purpose (None)
    warned = st.session_state.get(keys.LINK_WARNED, set())
    dropped = {k: v for k, v in _initial_url().items() if k not in kept and k not in warned}
    if dropped:
        listed = ", ".join(_code(f"{k}={v}") for k, v in dropped.items())
        (st.session_state.get(keys.LINK_BOX) or st).warning(
            f"Link parameter{'s' if len(dropped) > 1 else ''} {listed} not used by the {plain(view)} view: "
            "left out of the address."
        )


def _code(text: str) -> str:
    """Untrusted text as an inline code span (nothing inside is markdown; a backtick could end it)."""
    return "`" + str(text).replace("`", "ˋ") + "`"


def _first_rollout(db: str, run: str) -> int | None:
    index = data.rollout_index(db, run)
    return int(index["rollout_id"].iloc[0]) if len(index) else None


def _valid_rollout(db: str, run: str, value: Any) -> int | None:
    try:
        rid = int(value)
    except (TypeError, ValueError):
        return None
    ids = data.rollout_index(db, run)["rollout_id"]
    return rid if bool((ids == rid).any()) else None


def _on_run_change() -> None:
    st.session_state[keys.ROLLOUT] = _first_rollout(data.db_path(), st.session_state[keys.RUN])


def _on_step_change() -> None:  # another step: its first rollout
    steps = step_rollouts(data.db_path(), st.session_state[keys.RUN])
    st.session_state[keys.ROLLOUT] = steps[st.session_state[keys.STEP]][0]


def set_rollout(rollout_id: int) -> None:
    """Select another rollout of the current run (call before the sidebar renders, or in a callback)."""
    st.session_state[keys.ROLLOUT] = int(rollout_id)


def init_selection() -> Selection:
    """Resolve run and rollout (session, else URL, else the demo run's first rollout), draw the
    sidebar pickers, and write the selection into the URL."""
    db = data.db_path()
    url = _initial_url()
    if keys.SELECT_ROLLOUT in st.session_state:  # a row opened from the Explorer or the Group view
        st.session_state[keys.RUN], st.session_state[keys.ROLLOUT] = st.session_state.pop(keys.SELECT_ROLLOUT)
    st.session_state[keys.LINK_BOX] = st.container()
    names = [r["name"] for r in data.list_runs(db)]
    if not names:
        _replace_url({})
        return Selection(db, None, None, None)
    run = st.session_state.get(keys.RUN)
    if run not in names:
        wanted = url.get(keys.URL_RUN)
        run = wanted if wanted in names else (DEFAULT_RUN if DEFAULT_RUN in names else names[0])
        if wanted is not None and wanted != run and url.get(keys.URL_LIVE_PAGE) == "1":
            st.session_state[keys.AWAITED_RUN] = (
                wanted  # a followed run before its first step (app/ui/live.py)
            )
        elif wanted is not None and wanted != run:
            link_warning(keys.URL_RUN, wanted, "the store has no run of that name", f"run {run}")
        st.session_state[keys.RUN] = run
        st.session_state[keys.ROLLOUT] = (
            _valid_rollout(db, run, url.get(keys.URL_ROLLOUT)) if wanted == run else None
        )
        if wanted == run and url.get(keys.URL_ROLLOUT) is not None and st.session_state[keys.ROLLOUT] is None:
            link_warning(
                keys.URL_ROLLOUT,
                url.get(keys.URL_ROLLOUT),
                f"run {run} has no such rollout",
                "its first rollout",
            )
    if _valid_rollout(db, run, st.session_state.get(keys.ROLLOUT)) is None:
        st.session_state[keys.ROLLOUT] = _first_rollout(db, run)
    _follow_linked_step(db, run)

    index = data.rollout_index(db, run)
    labels = rollout_labels(db, run)
    rollout = st.session_state[keys.ROLLOUT]
    steps = step_rollouts(db, run)
    row = None if rollout is None else index.loc[index["rollout_id"] == rollout].iloc[0]
    step = None if row is None else int(row["step"])
    with st.sidebar:
        st.selectbox("Run", names, key=keys.RUN, on_change=_on_run_change)
        if len(steps) > 1:  # the rollout picker lists one step's rollouts, not the whole run's
            st.session_state[keys.STEP] = step  # follows the rollout, wherever it was chosen
            st.selectbox(
                "Step",
                list(steps),
                key=keys.STEP,
                format_func=lambda s: f"step {s} · {len(steps[s])} rollouts",
                on_change=_on_step_change,
            )
        options = steps.get(step, list(labels))
        st.selectbox("Rollout", options, key=keys.ROLLOUT, format_func=labels.get)
    group = None if row is None else int(row["group_id"])
    _replace_url({keys.URL_RUN: run, **({keys.URL_ROLLOUT: str(rollout)} if rollout is not None else {})})
    return Selection(db, run, rollout, group, resolve_classes(db, run))


def _follow_linked_step(db: str, run: str) -> None:
    """A link that filters the Explorer to one step (an alert's, a Trends point's: `?where=step=8,...`) puts
    the sidebar on that step, at its first rollout (unless the selected one is of that step): the sidebar
    says the step the table shows. Once per link followed: the filter stays in the URL while it applies, and
    the Step picker stays free meanwhile."""
    where = live_value(keys.URL_WHERE)
    followed, st.session_state[keys.WHERE_FOLLOWED] = st.session_state.get(keys.WHERE_FOLLOWED), where
    if not where or where == followed:
        return
    try:
        pinned = {
            int(f.value) for f in map(parse_where, where.split(",")) if f.column == "step" and f.op == "="
        }
    except (InputError, TypeError, ValueError):
        return  # the Explorer names what is wrong with the filter
    ids = step_rollouts(db, run).get(next(iter(pinned))) if len(pinned) == 1 else None
    if ids and st.session_state.get(keys.ROLLOUT) not in ids:
        st.session_state[keys.ROLLOUT] = ids[0]


def resolve_classes(db: str, run: str) -> tuple:
    """The token classes the views use for `run`: this session's (a link's `?classes=`, or the editor's
    "use" button), else the run's saved ones (`data.token_classes`). Mirrored to `?classes=` whenever they
    are not the defaults or not the run's saved ones, so a link carries them; a link's classes that cannot
    be used (bad JSON, a bad regex, an unknown kind or marker, a repeated name) are named in a warning and
    the run's own are shown."""
    chosen = st.session_state.setdefault(keys.SESSION_CLASSES, {})
    saved = data.token_classes(db, run)
    url = _initial_url()
    read = st.session_state.setdefault(keys.CLASSES_LINK_READ, set())
    if keys.URL_CLASSES in url and run not in read and url.get(keys.URL_RUN, run) == run:
        read.add(run)
        try:
            linked = token_classes.from_link(url[keys.URL_CLASSES])
        except InputError as exc:
            link_warning(keys.URL_CLASSES, url[keys.URL_CLASSES], str(exc), "the run's own token classes")
        else:
            if linked != saved:
                chosen[run] = linked
    classes = chosen.get(run, saved)
    if classes != saved or classes != token_classes.DEFAULT_CLASSES:
        publish(keys.URL_CLASSES, token_classes.to_link(classes))
    return classes


def use_classes(run: str, classes: tuple | None) -> None:
    """Use `classes` for `run` in this session (None: the run's saved ones again)."""
    chosen = st.session_state.setdefault(keys.SESSION_CLASSES, {})
    if classes is None:
        chosen.pop(run, None)
    else:
        chosen[run] = tuple(classes)


@st.cache_data(show_spinner=False, max_entries=16)
def rollout_labels(db: str, run: str) -> dict[int, str]:
    """Picker labels, each with the rollout's score on the run's main channel (`all`: the scores summed).

    Every rerun of every page draws the picker: reading the 448 demo rollouts' cells one by one through
    pandas took 0.19 s of each run, columns read as lists take 4 ms, and the cache skips even that."""
    index, main = data.rollout_index(db, run), data.main_channel(db, run)
    columns = {c: index[c].tolist() for c in data.run_channels(db, run) if c in index.columns}
    out = {}
    for i, row in enumerate(index.itertuples(index=False)):
        value = main_channel.score_on({c: v[i] for c, v in columns.items()}, main) if columns else None
        score = "" if value is None else f" · {main} {value:+.2f}"
        # the score right after the id: a narrow sidebar cuts the end of the label, not the score
        out[int(row.rollout_id)] = (
            f"#{row.rollout_id}{score} · group {row.group_id} · step {row.step} · {row.length} tok"
        )
    return out


@st.cache_data(show_spinner=False, max_entries=16)
def step_rollouts(db: str, run: str) -> dict[int, list[int]]:
    """step -> its rollout ids, in order: the sidebar's Step picker, and the Rollout picker's options under
    it. A training run has thousands of rollouts; one select box listing them all was sent and built by the
    browser on every rerun of every page (2,000 options: 0.14 s of the browser's time per page load,
    docs/benchmarks.md), where one step's are a few dozen."""
    index = data.rollout_index(db, run)
    out: dict[int, list[int]] = {}
    for step, rid in zip(index["step"].tolist(), index["rollout_id"].tolist(), strict=True):
        out.setdefault(int(step), []).append(int(rid))
    return dict(sorted(out.items()))


def selection() -> Selection:
    """The selection resolved by `init_selection` in this rerun (pages call this)."""
    return st.session_state[keys.SELECTION]


def url_widget(
    widget: Callable,
    label: str,
    *,
    key: str,
    url: str,
    default: Any,
    cast: Callable[[str], Any] = str,
    options: list | None = None,
    **kwargs,
) -> Any:
    """A widget whose value survives page switches and is mirrored to `?url=value`.

    `key` is the page-prefixed session key; the first value comes from the URL when a session
    starts from a link, else `default`. `options` (selectbox/radio) validate restored values.
    """
    keep = keys.kept(key)
    if key not in st.session_state:
        value = st.session_state.get(keep)
        if value is None and url in _initial_url():
            raw = _initial_url()[url]
            try:
                value = cast(raw)
            except (TypeError, ValueError):
                link_warning(url, raw, f"not a valid {getattr(cast, '__name__', 'value')}", default)
                value = None
            if value is not None and not _in_bounds(value, options, kwargs):
                link_warning(
                    url,
                    raw,
                    "not one of the choices or out of range" if options is not None else "out of range",
                    default,
                )
                value = None
        if value is None or (options is not None and value not in options):
            value = default
        st.session_state[key] = value
    if options is not None:
        kwargs["options"] = options
    result = widget(label, key=key, **kwargs)
    st.session_state[keep] = st.session_state[key]
    value = st.session_state[key]
    publish(url, ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value)
    return result


def url_choice(key: str, *, url: str, default: Any, options: list) -> Any:
    """What `url_widget` would return for a widget that is not drawn in this run (in a closed lazy
    expander): the value it last had, else the link's, else `default`; still mirrored to `?url=`."""
    value = st.session_state.get(key, st.session_state.get(keys.kept(key)))
    if value is None:
        value = _initial_url().get(url)
    if value not in options:
        value = default
    st.session_state[keys.kept(key)] = value
    publish(url, value)
    return value


def rerun(**kwargs) -> None:
    """`st.rerun` after writing what this run published into the URL: the rerun is asked with the query
    string as it is when it is called (a link's filter cleared before it must be gone from the next run)."""
    flush_url()
    st.rerun(**kwargs)


def url_fragment(fragment: Callable) -> Callable:
    """For a `st.fragment` that mirrors widgets to the URL: when a rerun of the fragment alone ends, write
    what it published (`flush_url`; the entry point does it for whole runs). Put it under `@st.fragment`."""

    @functools.wraps(fragment)
    def run(*args, **kwargs):
        try:
            return fragment(*args, **kwargs)
        finally:
            flush_url(fragment_only=True)

    return run


def _in_bounds(value: Any, options: list | None, kwargs: dict) -> bool:
    if options is not None:
        return value in options
    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    try:
        return (low is None or value >= low) and (high is None or value <= high)
    except TypeError:
        return True


def url_value(name: str) -> str | None:
    """The value `?name=` had when this session started (a bookmark or a shared link), else None."""
    return _initial_url().get(name)


def publish(name: str, value) -> None:
    """Mirror one of the view's choices into the URL (None removes it). The URL is written once, when the
    script run ends (`flush_url`): each write of `st.query_params` sends the browser a message that it
    handles by itself, and a view mirrors a dozen widgets (Tune: 18 writes on a fresh load)."""
    _pending()["set"][name] = None if value is None else str(value)


def _replace_url(params: dict[str, str]) -> None:
    """The URL becomes `params` and what this run publishes after (the earlier writes are dropped)."""
    pending = _pending()
    pending["replace"], pending["set"] = dict(params), {}


def _pending() -> dict:
    return st.session_state.setdefault(keys.URL_PENDING, {"replace": None, "set": {}})


def flush_url(fragment_only: bool = False) -> None:
    """Write what this run published into the URL, in one message, if it changes it (the entry point calls
    it when a run ends; a fragment, with `fragment_only`, when it ends a rerun of that fragment alone)."""
    if fragment_only and not getattr(get_script_run_ctx(), "fragment_ids_this_run", None):
        return
    pending = st.session_state.pop(keys.URL_PENDING, None)
    if not pending:
        return
    current = st.query_params.to_dict()
    final = dict(current if pending["replace"] is None else pending["replace"])
    for name, value in pending["set"].items():
        if value is None:
            final.pop(name, None)
        else:
            final[name] = value
    if final != current:
        st.query_params.from_dict(final)


ROLLOUT_PAGE = navigation.script("rollout")


def request_rollout(rollout_id: int) -> None:
    """From a widget callback (a table row or a group row clicked): open `rollout_id` in the Rollout view."""
    st.session_state[keys.OPEN_ROLLOUT] = (st.session_state.get(keys.RUN), int(rollout_id))


def follow_rollout_request() -> None:
    """Switch to the Rollout view when a callback asked for it (pages that open rollouts call this first).

    The selection (run and rollout) is set again in the Rollout view's own run, before its sidebar is
    drawn: the sidebar's widget values do not survive a `st.switch_page` from a page's script."""
    if keys.OPEN_ROLLOUT in st.session_state:
        st.session_state[keys.SELECT_ROLLOUT] = st.session_state.pop(keys.OPEN_ROLLOUT)
        # The query string as it is: `st.switch_page` without one clears it first, which the browser keeps
        # as this view's history entry (Back would come to the view without its choices).
        st.switch_page(ROLLOUT_PAGE, query_params=st.query_params.to_dict())
