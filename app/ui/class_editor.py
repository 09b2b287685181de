"""The token-class editor: the run's token classes as an editable table (regex, phrases or marker; first
match wins, `other` for the rest), reordered, used in this session (and its link) or saved with the run."""

from __future__ import annotations

import zlib

import pandas as pd
import streamlit as st

from app import actions, data, keys, state
from app.ui import widgets
from app.ui.text import plain
from backend.credit import token_classes


def show(sel) -> None:
    """Edit the token classes (regex, phrases or marker; first match wins, `other` for the rest): reorder
    them, use them in this session (and its link, `?classes=`), or save them with the run, so that every
    credit-by-class chart and table uses them (the Explorer's and Trends' summaries included)."""
    box = widgets.lazy_expander("Token classes of this run", key=keys.CLASS_EDITOR_OPEN)
    if box is None:
        return
    read_only = data.settings().read_only
    saved = data.token_classes(sel.db, sel.run)
    with box:
        st.caption(
            "kind: regex (searched in each token's text), phrases (separated by |, matched in the "
            "response text, any tokenizer), marker (key, style span). The first class that matches a "
            "token wins (reorder with Move up / Move down); every other token is `other`."
        )
        if sel.classes != saved:
            st.caption(
                "Shown: this session's classes (from the link, a move or the Use button), not saved "
                "with the run."
            )
        edited = _class_table(sel)
        _move_buttons(sel, edited, saved)
        use, save, reset = st.columns(3)
        _use_button(use, sel, edited, saved)
        if read_only:
            st.info("Saving classes is switched off: this server runs in read-only mode.")
            return
        _save_buttons(save, reset, sel, edited)


def _class_table(sel) -> pd.DataFrame:
    """The classes shown as an editable table (name, kind, pattern); returns the edited rows."""
    current = pd.DataFrame(
        [{"name": c.name, "kind": c.kind, "pattern": token_classes.shown_pattern(c)} for c in sel.classes]
    )
    # a new order is a new table: the editor starts again from it (its edits were taken along)
    table_key = f"token_class_table_{zlib.crc32(token_classes.to_link(sel.classes).encode()):08x}"
    return st.data_editor(
        current,
        num_rows="dynamic",
        key=table_key,
        width="stretch",
        column_config={
            "kind": st.column_config.SelectboxColumn(options=["regex", "phrases", "marker"]),
            "pattern": st.column_config.TextColumn("pattern", width="large"),
        },
    )


def _move_buttons(sel, edited: pd.DataFrame, saved) -> None:
    """A class to move and Move up / Move down: the edited classes, reordered, used in this session."""
    which, up, down = st.columns([2, 1, 1], vertical_alignment="bottom")
    names = [str(n) for n in edited["name"].dropna()]
    moving = which.selectbox("Class to move", names, key="token_class_move") if names else None
    for box, where, label in ((up, "up", "Move up"), (down, "down", "Move down")):
        if box.button(label, key=f"token_class_{where}", disabled=moving is None):
            try:
                moved = token_classes.move(token_classes.from_json(_class_rows(edited)), moving, where)
            except (ValueError, KeyError) as exc:
                st.error(plain(str(exc)))
            else:
                state.use_classes(sel.run, None if moved == saved else moved)
                state.rerun()


def _use_button(box, sel, edited: pd.DataFrame, saved) -> None:
    """Use the edited classes in this session (and its link); the store is unchanged."""
    if box.button(
        "Use in this session",
        key="token_class_use",
        help="Rollout and Compare use these classes, and the link carries them; the store is unchanged",
    ):
        try:
            classes = token_classes.from_json(_class_rows(edited))
        except (ValueError, KeyError) as exc:
            st.error(plain(str(exc)))
        else:
            state.use_classes(sel.run, None if classes == saved else classes)
            state.rerun()


def _save_buttons(save, reset, sel, edited: pd.DataFrame) -> None:
    """Save the edited classes with the run, or restore the defaults (both write to the store)."""
    if save.button("Save for this run", key="token_class_save"):
        try:
            classes = token_classes.from_json(_class_rows(edited))
            actions.save_token_classes(data.settings(), data.handle(), sel.run, classes)
        except (ValueError, KeyError, actions.Refused) as exc:
            st.error(plain(str(exc)))
        else:
            state.use_classes(sel.run, None)
            data.invalidate()
            state.rerun()
    if reset.button("Restore the defaults", key="token_class_reset"):
        actions.save_token_classes(data.settings(), data.handle(), sel.run, None)
        state.use_classes(sel.run, None)
        data.invalidate()
        state.rerun()


def _class_rows(edited: pd.DataFrame) -> list[dict]:
    """The editor's rows as `token_classes.from_json` reads them (phrases separated by | become lines)."""
    return [
        {**row, "pattern": token_classes.parse_pattern(str(row["kind"]), str(row["pattern"]))}
        for row in edited.dropna(how="all").to_dict("records")
    ]
