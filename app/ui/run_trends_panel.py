"""Trends over several runs: the charts of `creditlens trends --run a --run b ... --smooth W`,
a trace per run named by the run, smoothed lines over faint raw points."""

from __future__ import annotations

import streamlit as st

from app import keys, state
from app.ui import run_charts, text
from app.view_data import runs as runs_data

TOOLBAR = {"displayModeBar": True, "displaylogo": False}
AXES = {"step": "training step", "tokens_seen": "response tokens seen, up to and including the step"}


def draw(db: str, runs: list[str], estimator: str, credit: str) -> None:
    """The multi-run Trends screen below the view's pickers."""
    weight = state.url_widget(
        st.slider,
        "Smoothing (EMA weight)",
        key=keys.TRENDS_SMOOTH,
        url=keys.URL_SMOOTH,
        default=0.6,
        cast=float,
        min_value=0.0,
        max_value=0.95,
        step=0.05,
        help="Each run's exponential moving average over steps (0: none); the raw points stay, faint",
    )
    x = state.url_widget(
        st.radio,
        "x axis",
        key=keys.TRENDS_X,
        url=keys.URL_X,
        default="step",
        options=["step", "tokens_seen"],
        format_func=AXES.get,
        horizontal=True,
        help="Runs of different batch sizes or response lengths compare better by the tokens they trained on",
    )
    raw = runs_data.run_trends(db, tuple(runs), estimator, credit)
    smooth = runs_data.smoothed(raw, weight)
    alerts = runs_data.run_alerts(db, tuple(runs), estimator or "grpo")
    shares_of = "the final advantage" if credit == "final" else f"{estimator}'s advantages"
    flags = " ".join([*(f"--run {r}" for r in runs), f"--estimator {estimator}"])
    st.caption(
        text.with_code(
            f"{len(runs)} runs, a line per run (x: {AXES[x]}), each on its own main channel; class "
            f"shares of {shares_of} with {estimator}. Same numbers: "
            f"`creditlens trends {flags} --smooth {weight:g} --json`. "
            f"▼ on a run's line: a warning of the monitors at that step (hover for the detector; "
            f"{len(alerts)} on these runs). Same marks: "
            f"`creditlens compare-runs {flags} --alerts`"
        )
    )
    classes = [c.removeprefix("share_") for c in raw.columns if c.startswith("share_")]
    charts = [("reward", "reward (sum of channel scores)", False)]
    scores = [c for c in raw.columns if c.startswith("score_")]
    charts += [(c, f"mean score · {c.removeprefix('score_')}", False) for c in scores]
    if classes:
        chosen = st.selectbox(
            "Token class",
            classes,
            index=classes.index("filler") if "filler" in classes else 0,
            key="trends_runs_class",
        )
        charts += [
            (f"share_{chosen}", f"credit share · {chosen}", True),
            (f"excess_{chosen}", f"excess credit · {chosen} (share of |A| − share of tokens)", True),
        ]
    charts += [
        ("length", "response length (tokens)", False),
        ("mean_entropy", "entropy (token mean)", False),
        ("kl", "KL to the reference (k1)", False),
        ("zero_variance_share", "zero-variance groups", True),
    ]
    shown = [(c, title, pct) for c, title, pct in charts if c in raw.columns]
    for start in range(0, len(shown), 2):
        for box, (column, title, percent) in zip(st.columns(2), shown[start : start + 2], strict=False):
            fig = run_charts.runs_trend(raw, smooth, column, title, percent, alerts, x)
            box.plotly_chart(fig, key=f"trends_runs_{column}", width="stretch", config=TOOLBAR)
