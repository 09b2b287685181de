"""The credit-health alerts on the Trends view: the cached report (`backend.monitor.monitors.run_monitors`,
what `creditlens monitor` prints), alert steps marked on a trend figure, and the alert list with links to the
Explorer (the alert's step, filter and sort: its rollouts come first) and to each rollout. No math here."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from app import data, keys, navigation, state
from app.ui.fmt import safe
from backend.monitor import monitors as monitor
from backend.views import explorer

EXPLORER_PAGE, ROLLOUT_PAGE = navigation.script("explorer"), navigation.script("rollout")
COLOURS = {"info": "#7f7f7f", "warn": "#e69f00", "alert": "#d55e00"}


@st.cache_data(show_spinner="Running the credit-health monitors…", max_entries=32)
def report(db: str, run: str, estimator: str, config: tuple = ()) -> monitor.MonitorReport:
    """The monitors over the run with the default settings; the summaries they read are the ones the
    trends just computed, and channel_takeover's, stored by its first call (backend.monitor.channels)."""
    return monitor.run_monitors(data.store_handle(db), run, estimator, config, prepare_missing=False)


def report_ready(db: str, run: str, estimator: str, config: tuple = ()) -> bool:
    """Whether this report is in the server's cache (`report_for_session` has returned it to some session:
    the warm-up's, another user's or this one's): the Trends charts then wait for it instead of being drawn
    twice, once without their alert marks and again with them (a fresh page load drew 16 charts for 8)."""
    return data.remembered("monitor report", (db, run, estimator, config))


def report_for_session(db: str, run: str, estimator: str, config: tuple = ()) -> monitor.MonitorReport:
    """`report`, remembered as cached (`report_ready`)."""
    found = report(db, run, estimator, config)
    data.remember("monitor report", (db, run, estimator, config))
    return found


def toast_new(run: str, alerts: list[monitor.Alert], live: bool, settings: tuple) -> None:
    """While the page follows the run (Live), each warning or alert that this session had not drawn before is
    also a toast: fired by a step that just arrived (an `info`, an onset not yet confirmed, is only marked).
    `settings`: the estimator and its configuration (alerts under other settings are other alerts; the first
    report under new settings toasts nothing)."""
    seen_key = keys.alerts_seen(repr((run, settings)))
    found = {(a.step, a.detector, a.severity) for a in alerts}
    seen = st.session_state.get(seen_key)
    st.session_state[seen_key] = found | (seen or set())
    if not live or seen is None:
        return
    for a in sorted(alerts, key=lambda a: a.step):
        if a.severity != "info" and (a.step, a.detector, a.severity) not in seen:
            st.toast(
                f"**{a.severity.upper()}** · step {a.step} · `{a.detector}` ({safe(a.statistic)})", icon="⚠️"
            )


def unmarked_key(key: str) -> str:
    """The widget key of a Trends chart drawn before its alert marks (not containing `key`: the marked
    chart keeps `key`)."""
    return key.replace("trends_", "trends_unmarked_", 1)


def mark_alerts(fig: go.Figure, alerts: list[monitor.Alert]) -> go.Figure:
    """`fig` with a dashed vertical line at each alert's onset step (the worst severity's colour) and a
    label naming the severity, whose hover lists the detectors. Onsets closer than a twelfth of the steps
    shown share the first one's label ("warn ×3", every step's detectors in its hover): on a long run their
    labels were drawn over one another."""
    by_step: dict[int, list[monitor.Alert]] = {}
    for a in alerts:
        by_step.setdefault(a.step, []).append(a)
    xs = [float(x) for trace in fig.data for x in (trace.x if trace.x is not None else ())]
    near = (max(xs) - min(xs)) / 12 if xs else 0.0
    clusters: list[list[int]] = []
    for step in sorted(by_step):
        if clusters and step - clusters[-1][0] < near:
            clusters[-1].append(step)
        else:
            clusters.append([step])
    for cluster in clusters:
        found = [a for step in cluster for a in by_step[step]]
        for step in cluster:
            fig.add_vline(
                x=step,
                line_dash="dash",
                line_width=1,
                line_color=COLOURS[_worst(by_step[step])],
                opacity=0.8,
            )
        label = _worst(found) + (f" ×{len(cluster)}" if len(cluster) > 1 else "")
        hover = "<br>".join(
            f"step {a.step} · {a.severity}: {a.detector} ({safe(a.statistic)})" for a in found
        )
        fig.add_annotation(
            x=cluster[0],
            xref="x",
            y=1,
            yref="paper",
            yanchor="bottom",
            text=label,
            showarrow=False,
            font={"size": 11, "color": COLOURS[_worst(found)]},
            hovertext=hover,
        )
    return fig


def _worst(found: list[monitor.Alert]) -> str:
    return max(found, key=lambda a: monitor.SEVERITIES.index(a.severity)).severity


def explorer_link(run: str, alert: monitor.Alert) -> dict[str, str]:
    """The Explorer's URL parameters that list the alert's rollouts first (`where`: its step filter)."""
    params = {
        keys.URL_RUN: run,
        keys.URL_WHERE: ",".join(alert.explorer.get("where", [f"step={alert.step}"])),
    }
    sort = alert.explorer.get("sort")
    if sort:
        params[keys.URL_SORT], params[keys.URL_DESCENDING] = sort.lstrip("-"), str(sort.startswith("-"))
    return params


def follow_alert_link(live: dict, session, sortable: list[str]) -> None:
    """An alert link followed within a session (Trends → Explorer): its sort replaces the Explorer's kept
    sort once, so the alert's rollouts come first. live: the URL's `where`, `sort` and `desc`; session:
    `st.session_state` (the widgets' keys). Call before the sort widgets exist."""
    live = {k: live.get(k) for k in (keys.URL_WHERE, keys.URL_SORT, keys.URL_DESCENDING)}
    if not live[keys.URL_WHERE] or session.get(keys.EXPLORER_ALERT_LINK) == live:
        return
    session[keys.EXPLORER_ALERT_LINK] = live
    if live[keys.URL_SORT] in sortable:
        linked = (
            (keys.EXPLORER_SORT, live[keys.URL_SORT]),
            (keys.EXPLORER_DESCENDING, live[keys.URL_DESCENDING] == "True"),
        )
        for key, value in linked:
            session[key] = session[keys.kept(key)] = value


def linked_where(live: str | None, at_start: str | None) -> str | None:
    """The alert filter the Explorer applies: the URL's `where` (a link followed in this session, or the
    link the session started from), until the user clears it."""
    if live:
        st.session_state.pop(keys.EXPLORER_WHERE_CLEARED, None)
        st.session_state[keys.EXPLORER_WHERE] = live  # kept for the reruns that follow (the URL is rewritten)
        return live
    if st.session_state.get(keys.EXPLORER_WHERE_CLEARED):
        return None
    return st.session_state.get(keys.EXPLORER_WHERE) or at_start


def clear_where() -> None:
    st.session_state[keys.EXPLORER_WHERE_CLEARED] = True
    st.session_state.pop(keys.EXPLORER_WHERE, None)
    state.publish(keys.URL_WHERE, None)


def linked_filters(text: str | None) -> list[explorer.Filter]:
    """The Explorer's filters from an alert link's `where` (`step=12,truncated=true`); none when absent."""
    return [explorer.parse_where(part) for part in (text or "").split(",") if part.strip()]


def show_alerts(run: str, found: monitor.MonitorReport) -> None:
    """The alert list: severity, detector, the message, a link to the Explorer and to each rollout."""
    if not found.alerts:
        st.success("Credit health: no detector departs from the run's own history.")
    for a in found.alerts:
        with st.container(border=True):
            st.markdown(
                f"**{a.severity.upper()}** · step {a.step} · `{a.detector}` ({a.statistic})  \n{a.message}"
            )
            links = st.columns(min(len(a.rollouts), 5) + 1)
            with links[0]:
                st.page_link(
                    str(EXPLORER_PAGE), label=f"Explorer at step {a.step}", query_params=explorer_link(run, a)
                )
            for box, rollout in zip(links[1:], a.rollouts, strict=False):
                with box:
                    st.page_link(
                        str(ROLLOUT_PAGE),
                        label=f"rollout {rollout}",
                        query_params={keys.URL_RUN: run, keys.URL_ROLLOUT: str(rollout)},
                    )
    for note in found.notes:
        st.caption(f"not watched: {note}")
