"""Live: a page that follows a run while it trains. In the sidebar, under the run picker, a Live
toggle and the run's line, "step 11 · updated 4 s ago" (`backend.views.live`, the row `creditlens runs
--json` prints). While Live is on, a fragment looks at the store every `POLL_SECONDS`: a stat of the file,
and the run's row only when another process committed. When the run received rollouts it reruns the page
(not a reload: widgets keep their state; main.py's `refresh_if_store_changed` has dropped the cached reads).

Live is on by default for a run that grows (it received a step after its first import within the last ten
minutes: `import --follow`, `creditlens watch`, `--append`); `?live=1` forces it on, `?live=0` off. A live
link to a run that has no step yet (`creditlens watch` started before the trainer wrote one) waits for it:
the page shows another run meanwhile and switches to it when its first step lands (`take_awaited_run`,
`wait_for_run`)."""

from __future__ import annotations

import streamlit as st

from app import data, keys, state
from app.ui import text
from backend.views import live

POLL_SECONDS = 2.0


def progress(db: str, run: str) -> live.Progress:
    """The run's progress as this rerun reads the store (cached with the run list until the store changes)."""
    return live.from_row(next((r for r in data.list_runs(db) if r["name"] == run), None), run)


def follow(db: str, run: str, others: tuple[str, ...] = ()) -> bool:
    """Draw the Live toggle and the run's line in the sidebar; returns whether the page follows the run
    (and `others`, runs drawn beside it: a step of any of them redraws the page)."""
    drawn = progress(db, run)
    followed = (run, *(r for r in others if r != run))
    stored = keys.live(run)
    if stored not in st.session_state:
        forced = state.url_value(keys.URL_LIVE_PAGE)
        st.session_state[stored] = forced == "1" if forced in ("0", "1") else drawn.growing()
    on = st.sidebar.toggle(
        "Live",
        value=st.session_state[stored],
        key=keys.live_toggle(run),
        help="Follow the run while it trains: the page redraws when a step arrives (creditlens watch, "
        "import --follow). On by default for a run that received a step in the last ten minutes.",
    )
    st.session_state[stored] = on
    state.publish(keys.URL_LIVE_PAGE, "1" if on else None)
    if on:
        with st.sidebar:
            _ticker(db, followed, _fingerprint(db, followed))
    else:
        st.sidebar.caption(drawn.line())
    return on


def _fingerprint(db: str, runs: tuple[str, ...]) -> tuple:
    rows = {r["name"]: r for r in data.list_runs(db)}
    return tuple(live.from_row(rows.get(run), run).fingerprint if run in rows else None for run in runs)


@st.fragment(run_every=POLL_SECONDS)
def _ticker(db: str, runs: tuple[str, ...], drawn: tuple) -> None:
    data.refresh_if_store_changed(db)  # a stat; drops the cached reads when another process committed
    st.caption(f":material/radio_button_checked: {progress(db, runs[0]).line()}")
    if _fingerprint(db, runs) != drawn:
        state.rerun()  # the whole page, on the runs as they are now


def take_awaited_run(db: str) -> None:
    """Select the run a live link waits for once the store has it (call before the run picker is drawn)."""
    awaited = st.session_state.get(keys.AWAITED_RUN)
    if awaited is not None and any(r["name"] == awaited for r in data.list_runs(db)):
        del st.session_state[keys.AWAITED_RUN]
        st.session_state[keys.RUN], st.session_state[keys.ROLLOUT] = awaited, None


def wait_for_run(db: str) -> None:
    """While a live link's run has no step: say so in the sidebar, and rerun the page when it lands."""
    awaited = st.session_state.get(keys.AWAITED_RUN)
    if awaited is not None:
        with st.sidebar:
            _waiting(db, awaited)


@st.fragment(run_every=POLL_SECONDS)
def _waiting(db: str, awaited: str) -> None:
    data.refresh_if_store_changed(db)
    if any(r["name"] == awaited for r in data.list_runs(db)):
        state.rerun()  # the whole page: `take_awaited_run` selects it
    st.info(f"Waiting for run {text.plain(awaited)}: the page switches to it when its first step lands.")
