"""Sections a view draws only while they are open: lazy tabs (the open one mirrored to `?tab=`) and the
values of widgets that a closed lazy expander does not draw (`widgets.lazy_expander`). A chart or a widget in
a hidden tab or a closed expander is still mounted and drawn by the browser on every fresh page load; these
keep a view's first paint to what is open (docs/benchmarks.md, "App pages")."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app import keys, state


def seed_kept(key: str) -> bool:
    """Before drawing widget `key` again (its lazy expander reopened): give it the value it last had, which
    Streamlit dropped while it was not drawn. True when it has a value (then pass no default value)."""
    if key not in st.session_state and keys.kept(key) in st.session_state:
        st.session_state[key] = st.session_state[keys.kept(key)]
    return key in st.session_state


def kept_value(key: str, default: Any, drawn: bool) -> Any:
    """The value of widget `key`: drawn in this run, its value (kept for the runs it is not drawn in: a
    closed lazy expander's); not drawn, the value it last had, else `default`. Call after drawing it."""
    if drawn:
        st.session_state[keys.kept(key)] = st.session_state[key]
        return st.session_state[key]
    if key in st.session_state:
        return st.session_state[key]
    return st.session_state.get(keys.kept(key), default)


def lazy_tabs(tabs: dict[str, str], key: str, url: str) -> dict[str, object | None]:
    """Tabs whose content is drawn only while selected (picking one reruns the page): {name: the tab's
    container while it is open, else None}. `tabs` maps a name, the one `?url=` carries, to its label; the
    first is open unless the link names another, and the open one is mirrored to `?url=` (the first one
    leaves it out). A chart in a hidden tab is still mounted and drawn by the browser on every fresh load
    (docs/benchmarks.md): this is what keeps a view's first paint to its first tab. A test opens a tab by
    setting `key` to its label in the session state."""
    names, labels = list(tabs), list(tabs.values())
    keep = keys.kept(key)
    if key not in st.session_state:  # a fresh session (a link), or back on this view after another one
        wanted = st.session_state.get(keep) or state.url_value(url)
        st.session_state[key] = tabs.get(wanted, labels[0])
    drawn = st.tabs(labels, key=key, on_change="rerun")
    name = names[labels.index(st.session_state[key])]
    st.session_state[keep] = name
    state.publish(url, None if name == names[0] else name)
    return {n: (box if n == name else None) for n, box in zip(names, drawn, strict=True)}
