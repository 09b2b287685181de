"""The tuned β of a session: the Tune view's Apply sets it for one run, every view whose
numbers weigh channels (Tune, Rollout, Group, Compare, and the Explorer's and Trends' shares of A_final:
`creditlens rollouts/trends --beta`) then computes with it, shows a "tuned β" mark with a reset, and keeps it
in the URL as `?tuned=channel:β,...` (β with 4 significant digits, never a float's 16)."""

from __future__ import annotations

import streamlit as st

from app import keys, state
from app.ui.text import plain


def encode(betas: dict[str, float]) -> str:
    """`channel:β,...`, β with 4 significant digits (`{:.4g}`)."""
    return ",".join(f"{c}:{float(b):.4g}" for c, b in sorted(betas.items()))


def decode(text: str) -> dict[str, float] | None:
    """The β of `channel:β,...`; None when a part is not `name:number` with a number ≥ 0."""
    out = {}
    for part in (p for p in text.split(",") if p):
        name, sep, value = part.rpartition(":")
        try:
            beta = float(value)
        except ValueError:
            return None
        if not sep or not name or not beta >= 0:
            return None
        out[name] = beta
    return out


def betas(run: str) -> dict[str, float]:
    """The tuned β of `run` in this session ({} when none): set by `apply`, or by the link's `?tuned=`."""
    if keys.TUNED_BETAS not in st.session_state:
        raw = state.url_value(keys.URL_TUNED)
        link = decode(raw) if raw else None
        if raw and link is None:
            state.link_warning(keys.URL_TUNED, raw, "expected channel:β,... with β ≥ 0", "the default β")
        st.session_state[keys.TUNED_BETAS] = {"run": run, "betas": link or {}}
    held = st.session_state[keys.TUNED_BETAS]
    tuned = dict(held["betas"]) if held["run"] == run else {}
    state.publish(keys.URL_TUNED, encode(tuned) if tuned else None)
    return tuned


def apply(run: str, values: dict[str, float]) -> dict[str, float]:
    """Make `values` (rounded as the URL holds them) the tuned β of `run`; returns them."""
    rounded = {c: float(f"{float(b):.4g}") for c, b in values.items()}
    st.session_state[keys.TUNED_BETAS] = {"run": run, "betas": rounded}
    return rounded


def reset() -> None:
    st.session_state[keys.TUNED_BETAS] = {"run": None, "betas": {}}


def mark(run: str, key: str) -> tuple[tuple[str, float], ...]:
    """The "tuned β" mark with its reset (nothing when the run has no tuned β); returns the tuned β as
    sorted (channel, β) pairs, the form the views' caches take."""
    tuned = betas(run)
    if tuned:
        note, button = st.columns([5, 1])
        shown = ", ".join(f"{plain(c)} {b:g}" for c, b in tuned.items())
        note.info(f"**tuned β** (applied on the Tune view): {shown}")
        button.button("Reset to the default β", key=f"{key}_reset_tuned", on_click=reset)
    return tuple(sorted(tuned.items()))
