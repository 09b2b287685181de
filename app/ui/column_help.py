"""The Explorer's column headers: each column's definition (backend/views/explorer_columns.py, the list
the docs carry too) as the help its header shows on hover, shares as percents, the preview and the flags in
their own kind of column. The definitions live in the headers so that the caption above the table stays
short."""

from __future__ import annotations

import streamlit as st

from backend.views import explorer_columns

PERCENT = ("share_", "pos_share_", "neg_share_", "excess_", "turn_share_")
FLAGS = {"zero_variance": "zero var.", "truncated": "truncated"}


def column_config(columns: list[str]) -> dict:
    """`st.dataframe`'s column_config for the Explorer's `columns`: every known column with its help."""
    config = {}
    for column in columns:
        help_text = explorer_columns.column_help(column)
        if column == "preview":
            config[column] = st.column_config.TextColumn("response (start)", width="large", help=help_text)
        elif column in FLAGS:
            config[column] = st.column_config.CheckboxColumn(FLAGS[column], help=help_text)
        elif column.startswith(PERCENT) or column == "repetition":
            config[column] = st.column_config.NumberColumn(column, format="percent", help=help_text)
        elif help_text:
            config[column] = st.column_config.Column(column, help=help_text)
    return config


def glossary(columns: list[str]) -> str:
    """The definitions of `columns` as a markdown list (what the "What these columns mean" expander shows);
    a family of prefixed columns (`share_<class>`) once."""
    lines, seen = [], set()
    for column in columns:
        prefix = next((p for p in explorer_columns.PREFIXED if column.startswith(p)), None)
        name = f"{prefix}<name>" if prefix and column not in explorer_columns.EXACT else column
        text = explorer_columns.column_help(column)
        if text and name not in seen:
            seen.add(name)
            lines.append(f"- `{name}`: {text}")
    return "\n".join(lines)
