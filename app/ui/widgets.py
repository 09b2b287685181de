"""Reusable widgets: the estimator parameter form generated from the registry's config schema."""

from __future__ import annotations

import math
import time
from typing import Any

import streamlit as st
import streamlit.components.v2  # noqa: F401 - registers st.components.v2

from app import data, keys, navigation, state
from app.ui import fmt, scales, sections
from app.ui.text import plain, with_code
from backend.core.batch import ALL_CHANNELS
from backend.credit import as_trained
from backend.credit.main_channel import on_channel
from backend.estimators import registry

RESAMPLE_PAGE = navigation.script("resample")

# Fields better chosen elsewhere in the UI (the channel is picked by the view, not per estimator).
HIDDEN_FIELDS = {"channel"}


@st.cache_data(show_spinner=False)
def schema(name: str) -> dict:
    return registry.config_schema(name)


@st.cache_data(show_spinner=False)
def estimator_names(model_free: bool = False) -> list[str]:
    """Registered estimators; `model_free` leaves out those needing a model or resampled values."""
    out = []
    for name in registry.names():
        if model_free and not registry.get(name).model_free:
            continue
        out.append(name)
    return out


def canonical_estimator(name: str) -> str:
    """The current name of an estimator named in a link (deprecated aliases resolve, with a warning)."""
    return registry.canonical(name)


CREDIT_LABELS = {"final": "final A (every channel)", "channel": "the estimator's channel alone"}


def credit_picker(key: str) -> str:
    """What the credit shares describe: `final` (A_final = Σ_c β_c·Ã_c, the default, what the Rollout view
    colours) or `channel` (the estimator's output on the chosen channel alone); mirrored to `?credit=`."""
    return state.url_widget(
        st.selectbox,
        "Shares of",
        key=key,
        url=keys.URL_CREDIT,
        default="final",
        cast=lambda raw: "channel" if raw.startswith("channel:") else raw,  # a Compare link's channel credit
        options=list(CREDIT_LABELS),
        format_func=CREDIT_LABELS.get,
        help="final A: each token class's share of the final advantage, every channel in it; the "
        "estimator's channel alone: of the estimator's advantage on the reward channel picked",
    )


def estimator_picker(key: str, unavailable: dict[str, str] | None = None, default: str | None = None) -> str:
    """The view's estimator (a selectbox mirrored to `?est=`, grpo by default), on the channel of
    `channel_picker`. Estimators in `unavailable` (name -> reason and fix) are not offered;
    `unavailable_note` lists them."""
    unavailable = unavailable or {}
    sel = state.selection()
    name = state.url_widget(
        st.selectbox,
        "Estimator",
        key=key,
        url=keys.URL_ESTIMATOR,
        default=default or data.default_estimator(sel.db, sel.run),
        cast=canonical_estimator,  # a link with a deprecated name (e.g. ?est=hapo) opens its new name
        options=[n for n in estimator_names() if n not in unavailable],
        format_func=described,
        help="Each estimator with the first line of its description; `creditlens estimators` lists them all.",
    )
    info = schema(name)
    note = data.credit_note(sel.db, sel.run, name)  # on a trainer's run: the trainer's credit or a what-if
    if note:
        st.caption(plain(note))
    else:
        st.caption(info["description"] + (f"  \nSource: {info['source']}" if info["source"] else ""))
    return name


@st.cache_data(show_spinner=False)
def described(name: str) -> str:
    """`name — what it does` for pickers: the registry description's first sentence, cut at a word boundary
    to one short line."""
    text = fmt.clip_words(fmt.first_sentence(registry.get(name).description), 70)
    return f"{name} — {text}" if text else name


def lazy_expander(label: str, key: str):
    """A collapsed expander whose content is drawn only while it is open (opening it reruns the page), or
    None while it is closed. A table in a closed expander is still mounted and drawn on every fresh page
    load: Compare loaded in 5.1 s with its class editor and share table, 4.0 s without (docs/benchmarks.md).
    Its key keeps it open across reruns; a test opens it by setting that key in the session state."""
    box = st.expander(label, key=key, on_change="rerun")
    return box if box.open else None


def unavailable_note(unavailable: dict[str, str]) -> None:
    """The estimators this run cannot run, each with the reason and the fix (never offered, then failing)."""
    if not unavailable:
        return
    with st.expander(f"{len(unavailable)} estimator(s) unavailable on this run", expanded=False):
        # one list, one element (drawn on every load, even closed)
        st.markdown(
            "\n".join(
                f"- **{plain(name)}**: {with_code(_in_the_app(reason))}"
                for name, reason in unavailable.items()
            )
        )
        if any("resampl" in reason or "model-credit" in reason for reason in unavailable.values()):
            st.page_link(
                str(RESAMPLE_PAGE),
                label="Open the Resample view: resampling (Monte Carlo values) "
                "and model-based scores (OAR, GCPO) for this rollout",
                icon=":material/casino:",
            )


def _in_the_app(reason: str) -> str:
    """An estimator's unavailable reason as the app says it: where the app has a button for the fix (the
    Resample view resamples and computes model-based scores), that button first, the command second."""
    if "creditlens resample" in reason:
        return (
            reason.split("; run `creditlens resample")[0] + "; resample this rollout on the Resample "
            "view (the link below), or run `creditlens resample` first"
        )
    if "creditlens model-credit" in reason:
        return (
            reason.split("; run `creditlens model-credit")[0] + "; compute them on the Resample view "
            "(the link below: Compute for this group), or run `creditlens model-credit` first"
        )
    return reason


def url_slider(label: str, *, key: str, url: str, default: float, low: float, high: float, step: float):
    """A float slider mirrored to `?url=` (β, τ, η on the Tune view)."""
    return state.url_widget(
        st.slider,
        label,
        key=key,
        url=url,
        default=float(default),
        cast=float,
        min_value=low,
        max_value=high,
        step=step,
    )


def url_multiselect(
    label: str, options: list, *, key: str, url: str, default: list, least: int = 1, resolve=None, **kwargs
) -> list:
    """A multiselect mirrored to `?url=a,b`; a link's choice is kept if it names `least` known options.
    `resolve` maps a name from the link first (estimators: a deprecated alias to its current name)."""
    if key not in st.session_state:
        named = [(resolve or str)(n) for n in (state.url_value(url) or "").split(",") if n]
        picked = [n for n in dict.fromkeys(named) if n in options]
        st.session_state[key] = picked if len(picked) >= least else default
    chosen = st.multiselect(label, options, key=key, **kwargs)
    state.publish(url, ",".join(chosen))
    return chosen


def estimator_parameters(name: str, key: str) -> tuple[tuple[str, Any], ...]:
    """`estimator_form` in a collapsed "Estimator parameters" expander whose widgets are drawn only while
    it is open (`lazy_expander`): a closed expander's widgets were mounted on every fresh page load. Closed,
    the values are the ones last set (or a link's), as the form would return them."""
    box = lazy_expander("Estimator parameters", keys.form_open(key))
    if box is None:
        return estimator_form(name, key, drawn=False)
    with box:
        return estimator_form(name, key)


def estimator_form(name: str, key: str, container=None, drawn: bool = True) -> tuple[tuple[str, Any], ...]:
    """Widgets for every config field of estimator `name`; returns the non-default values as a sorted
    tuple of (field, value) pairs (hashable: the cache key of the computation). `drawn=False`: no widget,
    the values they last had (kept while they are not drawn), else a link's, else the defaults.

    Each non-default value is mirrored to the URL as `?<estimator>.<field>=value`, and a link's value is
    restored from it (checked against the field's type, range and choices; one that does not fit is
    named in a warning and the default is used)."""
    box = container or st
    overrides = {}
    for f in schema(name)["fields"]:
        if f["name"] in HIDDEN_FIELDS:
            continue
        wkey = keys.form_field(key, name, f["name"])
        label, help_text, default = f["name"], f["help"] or None, f["default"]
        url = keys.url_field(name, f["name"])
        sections.seed_kept(wkey)  # the value it had before its expander was closed
        _restore_field(f, wkey, url)
        if not drawn:
            value = st.session_state.get(wkey, default)
        elif f["choices"]:
            options = list(f["choices"])
            value = box.selectbox(
                label,
                options,
                index=options.index(default) if default in options else 0,
                key=wkey,
                help=help_text,
            )
        elif f["type"] == "bool":
            value = box.checkbox(label, value=bool(default), key=wkey, help=help_text)
        elif f["type"] in ("float", "int"):
            value = _number(box, f, wkey)
        else:
            value = box.text_input(
                label, value="" if default is None else str(default), key=wkey, help=help_text
            )
            if value == ("" if default is None else str(default)):
                value = default
        if drawn:
            st.session_state[keys.kept(wkey)] = st.session_state[wkey]
        if value != default:
            overrides[f["name"]] = value
        state.publish(url, value if value != default else None)
    if name == as_trained.AS_TRAINED:  # the run's recipe (ε, scaling, weights) unless a widget changed it
        sel = state.selection()
        overrides = as_trained.trainer_config(data.store_handle(sel.db), sel.run, name, overrides)
    return tuple(sorted(overrides.items()))


def with_channel(name: str, config: tuple, channel: str) -> tuple:
    """`config` with the reward channel set, for estimators that have a channel field (sorted pairs)."""
    return on_channel(name, config, channel)


def channel_picker(sel, key: str) -> str:
    """The reward channel the view's estimator reads: one of the run's channels, or `all` (the channel
    scores summed per rollout first, as TRL does). It starts at the run's main channel (chosen at import,
    changed on the Runs page) or a link's `?channel=`; a choice holds for every view of the run in this
    session and is mirrored to `?channel=`."""
    channels = data.run_channels(sel.db, sel.run)
    options = channels + ([ALL_CHANNELS] if ALL_CHANNELS not in channels else [])
    main = data.main_channel(sel.db, sel.run)
    chosen = st.session_state.setdefault(keys.CHANNEL_CHOICE, {})
    run = (sel.run, main)  # a new main channel (Runs page) starts every view on it again
    if run not in chosen and not any(r == sel.run for r, _ in chosen):
        linked = state.url_value(keys.URL_CHANNEL)
        if linked is not None and state.url_value(keys.URL_RUN) in (None, sel.run):
            if linked in options:
                chosen[run] = linked
            else:
                state.link_warning(
                    keys.URL_CHANNEL, linked, f"run {sel.run} has no such channel", f"its main channel {main}"
                )
    if chosen.get(run) not in options:
        chosen[run] = main if main in options else options[0]
    wkey = keys.channel_picker(key)
    st.session_state[wkey] = chosen[run]  # the session's choice, also when another view changed it

    def remember() -> None:
        chosen[run] = st.session_state[wkey]

    channel = st.selectbox(
        "Reward channel",
        options,
        key=wkey,
        on_change=remember,
        format_func=lambda c: _channel_label(c, main, summed=c == ALL_CHANNELS and c not in channels),
        help="The channel the estimator reads. (main): the run's main channel, set at import and on the Runs "
        "page. all: every channel's score summed per rollout first (a missing one skipped), then the "
        "estimator, as TRL does with several reward functions.",
    )
    state.publish(keys.URL_CHANNEL, channel)
    return channel


def _channel_label(channel: str, main: str, summed: bool) -> str:
    """`all (sum, main)`, `format_ok (main)`, `correctness`: what the channel picker lists."""
    notes = (["sum"] if summed else []) + (["main"] if channel == main else [])
    return channel + (f" ({', '.join(notes)})" if notes else "")


def _restore_field(f: dict, wkey: str, url: str) -> None:
    """Seed widget `wkey` from the link's `?url=` once, if the value fits field `f`; else warn."""
    raw = state.url_value(url)
    if raw is None or wkey in st.session_state or st.session_state.get(keys.restored(wkey)):
        return
    st.session_state[keys.restored(wkey)] = True
    try:
        if f["choices"]:
            value = next(c for c in f["choices"] if str(c) == raw)
        elif f["type"] == "bool":
            value = {"true": True, "false": False}[raw.lower()]
        elif f["type"] in ("float", "int"):
            value = (int if f["type"] == "int" else float)(raw)
            if (f["low"] is not None and value < f["low"]) or (f["high"] is not None and value > f["high"]):
                raise ValueError(f"outside [{f['low']}, {f['high']}]")
        else:
            value = raw
    except (StopIteration, KeyError, ValueError) as exc:
        reason = f"not a valid value of {f['name']}" + (f" ({exc})" if str(exc) else "")
        state.link_warning(url, raw, reason, f"the default {f['default']}")
        return
    st.session_state[wkey] = value


_CREDIT_TEXT_JS = """
export default function(component) {
  const { data, setTriggerValue, parentElement } = component;
  let box = parentElement.querySelector('.credit-text-root');
  if (!box) {
    box = document.createElement('div');
    box.className = 'credit-text-root';
    parentElement.appendChild(box);
  }
  box.innerHTML = data;  // built by app.ui.heatmaps.credit_text_html: every token's text is HTML-escaped
  box.querySelectorAll('[data-pos]').forEach((el) => {
    el.onclick = () => setTriggerValue('clicked', Number(el.dataset.pos));
  });
}
"""
_CREDIT_TEXT_CSS = """
.credit-text { white-space: pre-wrap; word-break: break-word; font-family: ui-monospace, monospace;
  font-size: 14px; line-height: 1.9; max-height: 420px; overflow-y: auto; padding: 4px 2px; }
.credit-text .tok { box-shadow: inset 0 0 0 0.5px rgba(0,0,0,0.25); border-radius: 2px; cursor: pointer;
  padding: 1px 0; }
.credit-text .tok:hover { outline: 1px solid #555; }
.credit-text .tok.sel { outline: 2px solid #111; }
.credit-text .tok.dim { opacity: 0.85; }
.credit-text .turn-label { display: block; margin: 6px 0 1px; font: 600 11px sans-serif; color: #444;
  letter-spacing: 0.02em; text-transform: uppercase; }
.credit-text .turn-label.role-tool, .credit-text .turn-label.role-environment,
.credit-text .turn-label.role-user, .credit-text .turn-label.role-system { color: #888; }
.credit-text .nl { opacity: 0.5; }
"""
_credit_text_component = st.components.v2.component(
    "creditlens_credit_text", js=_CREDIT_TEXT_JS, css=_CREDIT_TEXT_CSS
)


def credit_text(html_text: str, key: str) -> int | None:
    """Draw `heatmaps.credit_text_html` output; returns the position of a token clicked in this rerun."""
    result = _credit_text_component(data=html_text, key=key, on_clicked_change=lambda: None)
    clicked = getattr(result, "clicked", None)
    return None if clicked is None else int(clicked)


def row_scale_toggle(key: str, rows: dict, drawn: bool = True) -> str:
    """Compare's colour scale, one click between a robust shared scale (the default: `scales.robust_range`,
    which no added row can stretch; a caption names each row it saturates and by how much) and per-row
    scales (each row labelled with its range). Mirrored to `?scale=robust|row`; returns the mode.
    `drawn=False` (its tab closed): no toggle; the mode it last had (kept), else the link's, still in the
    URL."""
    session_key = keys.scale_mode(key)
    if not sections.seed_kept(session_key):
        raw = state.url_value(keys.URL_SCALE)
        if raw not in (None, "row", "robust"):
            state.link_warning(keys.URL_SCALE, raw, "Compare's scale is robust or row", "the robust scale")
        st.session_state[session_key] = raw == "row"
    if drawn:
        per_row = st.toggle(
            "Per-row scales",
            key=session_key,
            help="Each row on its own scale, its range beside its label; off: one robust scale for every "
            "row.",
        )
    else:
        per_row = bool(st.session_state[session_key])
    st.session_state[keys.kept(session_key)] = per_row
    mode = "row" if per_row else "robust"
    state.publish(keys.URL_SCALE, mode)
    if drawn:
        st.caption(plain(scales.active_scale(rows, mode)))
    return mode


def scale_controls(
    key: str, lockable: bool = False, current: float | None = None, rows: dict | None = None
) -> tuple[str, float | None]:
    """The colour-scale mode (`?scale=`, `auto` by default) and, when `lockable`, a lock that keeps the
    shared half-width fixed (`?zlock=`): a β move then recolours without rescaling. With `rows` (the values
    the scale is for), a caption says which scale is active. Returns (mode, locked half-width)."""
    mode_col, lock_col = st.columns([3, 2])
    with mode_col:
        # a select box, not five long radio options: one widget to draw on each load, and the code of the
        # run picker's select box, already loaded (docs/benchmarks.md)
        mode = state.url_widget(
            st.selectbox,
            "Colour scale",
            key=keys.scale_mode(key),
            url=keys.URL_SCALE,
            default="auto",
            options=list(scales.SCALES),
            format_func=lambda m: scales.SCALE_LABELS[m],
        )
    if not lockable:
        if rows is not None:
            st.caption(plain(scales.active_scale(rows, mode)))
        return mode, None
    if rows is not None:  # the lock keeps the half-width the chosen scale draws now
        drawn = scales.scale_peaks(rows, mode)
        current = next((v for n, v in drawn.items() if n not in scales.OWN_SCALE_ROWS), current)
    lock_key = keys.scale_lock(key)
    if lock_key not in st.session_state:
        raw = state.url_value(keys.URL_SCALE_LOCK)
        try:
            st.session_state[lock_key] = float(raw) if raw is not None else None
        except ValueError:
            state.link_warning(keys.URL_SCALE_LOCK, raw, "not a number", "an unlocked scale")
            st.session_state[lock_key] = None
        if st.session_state[lock_key] is not None and not st.session_state[lock_key] > 0:
            state.link_warning(
                keys.URL_SCALE_LOCK, raw, "the half-width must be positive", "an unlocked scale"
            )
            st.session_state[lock_key] = None
    with lock_col:
        locked = st.toggle(
            "Lock the scale",
            value=st.session_state[lock_key] is not None,
            key=keys.scale_lock_toggle(key),
            help="Keep today's colour half-width while you move β, so colours compare across moves.",
            disabled=mode == "row",
        )
    if locked and mode != "row":
        if st.session_state[lock_key] is None:
            st.session_state[lock_key] = current
    else:
        st.session_state[lock_key] = None
    value = st.session_state[lock_key]
    state.publish(keys.URL_SCALE_LOCK, None if value is None else f"{value:.6g}")
    if rows is not None:
        st.caption(plain(scales.active_scale(rows, mode, value)))
    return mode, value


def _number(box, f: dict, wkey: str):
    low, high, default = f["low"], f["high"], f["default"]
    is_int = f["type"] == "int"
    cast = int if is_int else float
    bounded = low is not None and high is not None and math.isfinite(low) and math.isfinite(high)
    if bounded and (high - low) <= 100 and not (not is_int and 0 < abs(default or 0) < 1e-3):
        step = 1 if is_int else (0.01 if high - low <= 10 else 0.1)
        return box.slider(
            f["name"], cast(low), cast(high), cast(default), step=cast(step), key=wkey, help=f["help"] or None
        )
    kwargs = {}
    if low is not None:
        kwargs["min_value"] = cast(low)
    if high is not None:
        kwargs["max_value"] = cast(high)
    fmt = None if is_int else ("%.2e" if default and abs(default) < 1e-3 else "%.4g")
    return box.number_input(
        f["name"], value=cast(default), key=wkey, help=f["help"] or None, format=fmt, **kwargs
    )


def follow_job(job, shown_key: str, verb: str, unit: str) -> bool:
    """Draw a background job's progress bar until it ends, once per job (`shown_key` remembers the last
    job shown). True when the job has just been followed to its end: the caller reports its result."""
    if job is None or not (job.running or st.session_state.get(shown_key) is not job):
        return False
    bar = st.progress(job.fraction, text=f"{verb}…")
    while job.running:
        bar.progress(job.fraction, text=f"{verb}… {job.done}/{job.total or '?'} {unit}")
        time.sleep(0.1)
    bar.progress(1.0, text="done")
    st.session_state[shown_key] = job
    data.invalidate()
    if job.error:
        st.error(job.error)
    return job.error is None and job.result is not None


def link_dropped(url: str, options: list, unavailable: dict[str, str], resolve=None) -> dict[str, str]:
    """The names a link's `?url=a,b` gives that are not among `options`, each with why (an
    estimator in a Compare link that cannot run on the run is listed with its reason: a link that silently
    dropped it would show a different comparison than the one shared)."""
    named = [(resolve or str)(n) for n in (state.url_value(url) or "").split(",") if n]
    return {
        n: unavailable.get(n, "not a known estimator (`creditlens estimators` lists them)")
        for n in dict.fromkeys(named)
        if n not in options
    }
