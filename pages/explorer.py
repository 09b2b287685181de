"""Explorer: every rollout of the run in one table — sort, filter, search, page; a row opens the rollout."""

import math

import streamlit as st

from app import keys, state
from app.ui import column_help, landed_panel, live, monitor_panel, panels, sections, text, tuned_beta, widgets
from app.view_data import explorer as explorer_data

state.follow_rollout_request()  # a row clicked in the last rerun opens the Rollout view
sel = state.selection()
if sel.run is None:
    st.info("The store has no runs yet. Import one on the Runs page.")
    state.stop()

live.follow(sel.db, sel.run)  # Live: the table redraws when the run receives a step
st.title(f"Explorer · {text.plain(sel.run)}")
panels.saved_classes_note(sel)

pick, channel_box, credit_box, versus, params = st.columns([1, 1, 1, 1, 2])
with pick:
    estimator = widgets.estimator_picker(keys.EXPLORER_ESTIMATOR)
with channel_box:
    channel = widgets.channel_picker(sel, "explorer")
with credit_box:
    credit = widgets.credit_picker(keys.EXPLORER_CREDIT)
with versus:
    compare = state.url_widget(
        st.selectbox,
        "Compare with (Spearman per rollout)",
        key=keys.EXPLORER_VERSUS,
        url=keys.URL_VERSUS,
        default="none",
        options=["none", *widgets.estimator_names()],
        format_func=lambda n: n if n == "none" else widgets.described(n),
    )
with params:  # its widgets drawn only while open
    config = widgets.with_channel(
        estimator, widgets.estimator_parameters(estimator, keys.EXPLORER_FORM), channel
    )
compare = None if compare == "none" else compare
tuned = tuned_beta.mark(sel.run, "explorer")  # the β applied on the Tune view: in A_final's shares
betas = tuned if credit == "final" else ()
compare_config = () if compare is None else widgets.with_channel(compare, (), channel)

search_box, sort_box, order_box, size_box = st.columns([3, 2, 1, 1])
with search_box:
    search = state.url_widget(
        st.text_input,
        "Search prompt and response",
        key=keys.EXPLORER_SEARCH,
        url=keys.URL_SEARCH,
        default="",
        placeholder="text in the prompt or the response",
    )
base = explorer_data.ExplorerQuery(
    estimator=estimator,
    config=config,
    compare=compare,
    compare_config=compare_config,
    credit=credit,
    betas=betas,
)
columns = panels.compute_or_explain(explorer_data.explorer_columns, sel.db, sel.run, base)
sortable = [c for c in columns if c != "preview"]
monitor_panel.follow_alert_link(state.live_url(), st.session_state, sortable)  # an alert's sort
with sort_box:
    sort = state.url_widget(
        st.selectbox,
        "Sort by",
        key=keys.EXPLORER_SORT,
        url=keys.URL_SORT,
        default="rollout_id",
        options=sortable,
    )
with order_box:
    descending = state.url_widget(
        st.toggle,
        "Descending",
        key=keys.EXPLORER_DESCENDING,
        url=keys.URL_DESCENDING,
        default=False,
        cast=lambda v: v == "True",
    )
with size_box:
    size = state.url_widget(
        st.selectbox,
        "Rows per page",
        key=keys.EXPLORER_PAGE_SIZE,
        url=keys.URL_PAGE_SIZE,
        default=50,
        cast=int,
        options=[25, 50, 100, 200],
    )

numeric = [c for c in sortable if c not in explorer_data.FLAG_COLUMNS and c not in ("rollout_id", "group_id")]
# A Trends alert links here with its step and filter (`where=step=12,truncated=true`): its rollouts first.
where = monitor_panel.linked_where(state.live_value(keys.URL_WHERE), state.url_value(keys.URL_WHERE))
state.publish(keys.URL_WHERE, where)  # the filter stays in the link while it applies
filters: list[explorer_data.Filter] = panels.compute_or_explain(monitor_panel.linked_filters, where)
linked = ", ".join(
    f"{f.column}{f.op}{f.value:g}" if isinstance(f.value, float) else f"{f.column}{f.op}{f.value}"
    for f in filters
)
if filters and st.button(f"Clear the link's filter: {linked}", key="explorer_clear_where"):
    monitor_panel.clear_where()
    state.rerun()
# The flag and range filters: their widgets drawn only while the expander is open; closed, the filters set
# before still apply (their values kept in the session).
box = widgets.lazy_expander("Filters: flags and ranges", keys.EXPLORER_FILTERS_OPEN)
flag_cols = (
    [None] * len(explorer_data.FLAG_COLUMNS) if box is None else box.columns(len(explorer_data.FLAG_COLUMNS))
)
for column, flag in zip(flag_cols, explorer_data.FLAG_COLUMNS, strict=True):
    fkey = f"explorer_flag_{flag}"
    if column is not None:
        sections.seed_kept(fkey)
        column.radio(flag.replace("_", " "), ["any", "yes", "no"], key=fkey, horizontal=True)
    choice = sections.kept_value(fkey, "any", drawn=column is not None)
    if choice != "any":
        filters.append(explorer_data.Filter(flag, "=", choice == "yes"))
if box is not None:
    sections.seed_kept("explorer_ranged")
    box.multiselect("Range filters on", numeric, key="explorer_ranged")
ranged = [c for c in sections.kept_value("explorer_ranged", [], drawn=box is not None) if c in numeric]
bounds = explorer_data.explorer_ranges(sel.db, sel.run, base, tuple(ranged)) if ranged else {}
for column in ranged:
    low, high = bounds.get(column, (None, None))
    if low is None or high is None or low == high:
        if box is not None:
            box.caption(f"{column}: a single value ({low}) in this run; nothing to filter")
        continue
    integer = column in ("step", "length")
    low, high = (int(low), int(high)) if integer else (float(low), float(high))
    rkey = f"explorer_range_{column}"
    if box is not None:
        seeded = sections.seed_kept(rkey)
        box.slider(column, low, high, None if seeded else (low, high), key=rkey)
    chosen = sections.kept_value(rkey, (low, high), drawn=box is not None)
    if chosen[0] > low:
        filters.append(explorer_data.Filter(column, ">=", chosen[0]))
    if chosen[1] < high:
        filters.append(explorer_data.Filter(column, "<=", chosen[1]))

# A new search, sort or filter starts again at page 1.
signature = (estimator, config, compare, credit, betas, search, sort, descending, size, tuple(filters))
if st.session_state.get(keys.EXPLORER_SIGNATURE) != signature:
    st.session_state[keys.EXPLORER_SIGNATURE] = signature
    st.session_state[keys.EXPLORER_PAGE_NO] = 1
page_no = int(st.session_state.get(keys.EXPLORER_PAGE_NO, 1))

query = explorer_data.ExplorerQuery(
    estimator=estimator,
    config=config,
    compare=compare,
    compare_config=compare_config,
    sort=sort,
    descending=descending,
    search=search,
    filters=tuple(filters),
    limit=size,
    offset=(page_no - 1) * size,
    credit=credit,
    betas=betas,
)
page = panels.compute_or_explain(explorer_data.explorer_page, sel.db, sel.run, query)
for note in page.notes:
    st.caption(f"note: {text.plain(note)}")
pages = max(1, math.ceil(page.total / size))
if page_no > pages:  # the rows shrank under the page (another process deleted some)
    st.session_state[keys.EXPLORER_PAGE_NO] = pages
    state.rerun()

st.caption(
    f"{page.total} rollouts match · page {page_no} of {pages} · click a row to open it in the Rollout view. "
    + explorer_data.credit_caption(estimator, text.plain(channel), credit, bool(betas))
)
st.session_state[keys.EXPLORER_IDS] = [int(r) for r in page.rows["rollout_id"]]


def _open_selected() -> None:
    selection = st.session_state[keys.EXPLORER_TABLE]["selection"]
    rows = selection["rows"] or [cell[0] for cell in selection.get("cells", [])]  # a row or any of its cells
    ids = st.session_state.get(keys.EXPLORER_IDS, [])
    if rows and rows[0] < len(ids):
        state.request_rollout(ids[rows[0]])


def _pinned(config: dict, columns: tuple[str, ...]) -> dict:
    """`config` with `columns` pinned at the left edge, each keeping its own settings: a wide table scrolled
    to its right still shows which rollout a row is and what it is sorted by."""
    return {**config, **{c: {**config.get(c, {}), "pinned": True} for c in columns}}


# The id and the sorted column, the response, its scores, then the credit: the columns reordered for reading
# (the data is the CLI's).
shown_order = explorer_data.reading_order(page.columns, sort)
st.dataframe(
    page.rows,
    column_order=shown_order,
    key=keys.EXPLORER_TABLE,
    on_select=_open_selected,
    selection_mode=["single-row", "single-cell"],
    hide_index=True,
    width="stretch",
    height=min(38 + 35 * max(len(page.rows), 1), 740),
    # each header's hover help defines its column; the id and the sorted column stay in view
    column_config=_pinned(column_help.column_config(page.columns), ("rollout_id", sort)),
)
st.number_input("Page", min_value=1, max_value=pages, step=1, key=keys.EXPLORER_PAGE_NO)

glossary = widgets.lazy_expander("What these columns mean", keys.EXPLORER_COLUMNS_HELP)
if glossary is not None:
    glossary.markdown(column_help.glossary(shown_order))

landed_panel.explorer_section(sel.db, sel.run, estimator, config, keys.EXPLORER_LANDED_OPEN)

with st.expander("The same table on the command line"):
    parts = ["creditlens rollouts", f"--db {sel.db}", f"--run {sel.run}", f"--estimator {estimator}"]
    parts += [f"--set {k}={v}" for k, v in config if k != "channel"] + [f"--channel {channel}"]
    parts += [f"--compare {compare}"] if compare else []
    parts += [] if credit == "final" else [f"--credit {credit}"]
    parts += [f"--beta {c}={b:g}" for c, b in betas]
    parts += [f"--sort={'-' if descending else ''}{sort}"]
    parts += [f"--search '{search}'"] if search else []
    parts += [f"--where '{f.column}{f.op}{str(f.value).lower()}'" for f in filters]
    parts += [f"--limit {size}", f"--offset {(page_no - 1) * size}", "--json"]
    text.text_block(" ".join(parts))
