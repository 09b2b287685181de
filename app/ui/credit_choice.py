"""The one credit picker of Compare: the final A or a channel's term of it, from the backend's list of
choices (`app.view_data.compare.credit_choices`), mirrored to `?credit=`."""

from __future__ import annotations

import streamlit as st

from app import keys, state

CHANNEL = "channel:"  # a channel's choice is `channel:<name>` (backend.views.compare.CHANNEL)
SUMMED = "summed"  # the what-if on the scores summed first (backend.views.compare.SUMMED)
ALL_CHANNELS = "all"  # the channel picker's `all` (backend.core.batch.ALL_CHANNELS)


def picker(choices: dict[str, tuple[str, str]], key: str, main: str) -> str:
    """A selectbox over `choices` (key -> (label, help)), the first by default. A link's `?credit=` may be a
    key, a bare channel name, or the Explorer's `channel` (the estimator's channel alone: here the
    `?channel=` of the link, else the run's main channel `main`)."""
    options = list(choices)

    def from_link(raw: str) -> str:
        if raw == "channel":
            raw = state.url_value(keys.URL_CHANNEL) or main
        return raw if raw in choices or CHANNEL + raw not in choices else CHANNEL + raw

    # a Compare link of before, `?channel=all`, meant the estimators on the scores summed first
    summed = state.url_value(keys.URL_CHANNEL) == ALL_CHANNELS and SUMMED in choices
    return state.url_widget(
        st.selectbox,
        "Credit",
        key=key,
        url=keys.URL_CREDIT,
        default=SUMMED if summed else options[0],
        cast=from_link,
        options=options,
        format_func=lambda k: choices[k][0],
        help="The one credit every chart below reads (rows, difference, rank agreement, mass by class): "
        + "; ".join(f"{label}: {text}" for label, text in choices.values()),
    )
