"""Every URL query parameter and `st.session_state` key the app reads back: one list, used by name.

A link holds the whole view (`?run=demo&rollout=3&est=gae&pos=17`), so the parameters are a contract with
every bookmark and shared link; the session keys are one between a widget and the code that reads its value
(and the AppTests that set it). The code names both from here, never by a string of its own
(tests/app/test_keys.py checks it). Widget keys that nothing reads back (buttons, charts, tables drawn
once) stay beside their widget.
"""

from __future__ import annotations

# ---- URL query parameters (`?name=value`) ------------------------------------------------------------

URL_TOKEN = "token"  # the access token, once: the gate trades it for a cookie (app/server/gate.py)
URL_RUN = "run"
URL_ROLLOUT = "rollout"
URL_CLASSES = "classes"  # this session's token classes, when they are not the run's saved ones
URL_CHANNEL = "channel"  # the reward channel the estimator reads
URL_ESTIMATOR = "est"
URL_SCALE = "scale"  # the colour-scale mode
URL_SCALE_LOCK = "zlock"  # the locked colour half-width
URL_WINDOW = "from"  # the first token of the window shown of a long response
URL_POSITION = "pos"  # the selected token (Rollout)
URL_VERSUS = "vs"  # the estimator compared with, per rollout (Explorer)
# the credit read: final (A_final) or channel (the estimator alone) in Explorer and Trends; in Compare a key
# of backend.views.compare.credit_choices (final, channel:<name>, summed)
URL_CREDIT = "credit"
URL_SEARCH = "q"
URL_SORT = "sort"
URL_DESCENDING = "desc"
URL_PAGE_SIZE = "size"
URL_WHERE = "where"  # an alert's filter (Trends -> Explorer)
URL_ESTIMATORS = "ests"  # the estimators compared (Compare, Oracle)
URL_DIFFERENCE = "diff"  # the two estimators of the difference (Compare)
URL_PIPELINE = "pipeline"  # split or single (Oracle)
URL_SAMPLES = "m"  # samples per position (Resample)
URL_ENGINE = "engine"
URL_POSITIONS = "positions"  # the positions to resample
URL_BASELINE = "base"  # none, side by side, difference (Tune)
URL_AGAINST = "against"  # the baseline: the default β or the summed reward
URL_ETA = "eta"
URL_REPLAY_MODE = "mode"  # projected or lexicographic dual ascent
URL_TAB = "tab"  # the open tab of a view's lazy tabs (sections.lazy_tabs), when not its first


# Families of keys, one per name (a channel, a widget, a view): a template that the names fill in, in the
# order the comment gives; the strings a link or an AppTest holds stand here, one line each.
url_field = "{}.{}".format  # (estimator, field) a config field off its default: ?gae.lam=0.9
url_beta = "beta_{}".format  # (channel) Tune's β
url_normalization = "norm_{}".format  # (channel)
url_tau = "tau_{}".format  # (channel)
url_violation = "viol_{}".format  # (channel) Tune's violation threshold
URL_TUNED = "tuned"  # the tuned β every view uses: channel:β,... (app/ui/tuned_beta.py)
URL_EFFECT_OF = "effect"  # Tune: the β whose run-level effect is drawn (replay or sliders)
URL_RUNS = "runs"  # the runs side by side: a,b,c (Trends over several runs, Runs comparison)
URL_SMOOTH = "smooth"  # the EMA weight of the lines over several runs
URL_X = "x"  # the x axis of Trends over several runs: step or tokens_seen
URL_LIVE_PAGE = "live"  # 1: follow the run while it trains; 0: do not (app/ui/live.py)


# ---- session keys: the store, the shared selection and the URL (app/data.py, app/state.py) ------------

DB = "app_db"  # the store this session reads (the AppTests set it; else --db or $CREDITLENS_DB)
RUN = "sel_run"  # the selected run and rollout (the sidebar pickers)
ROLLOUT = "sel_rollout"
STEP = "sel_step"  # the sidebar's Step picker: follows the rollout; a new step selects its first rollout
WHERE_FOLLOWED = "_where_followed"  # the last run's `?where=`: a new one moves the Step (state.py)
SELECTION = "_selection"  # the Selection resolved in this rerun
VIEW_SHOWN = "_view_shown"  # the title of the view this run shows
URL_AT_START = "_url_at_start"  # the query string the session started from (a bookmark, a link)
URL_PENDING = (
    "_url_pending"  # what this script run writes into the URL, written when it ends (state.flush_url)
)
URL_LIVE = "_url_live"  # the query string this script run was asked with (a page link, a switch_page)
LINK_BOX = "_link_warnings_box"  # where the link warnings go, at the top of the view
LINK_WARNED = "_link_warned"  # the link parameters already warned about
LINK_DROPS_NAMED = "_link_drops_named"  # the link's parameters no view kept were named (once)
SESSION_CLASSES = "_session_classes"  # run -> the token classes used in this session, not saved
CLASSES_LINK_READ = "_classes_link_read"  # the runs whose `?classes=` was read
OPEN_ROLLOUT = "_open_rollout"  # (run, rollout) asked to open in the Rollout view, by a callback
SELECT_ROLLOUT = "_select_rollout"  # ... and to select there, before the sidebar is drawn
CHANNEL_CHOICE = "_channel_choice"  # (run, main channel) -> the channel this session's views read
kept = "_keep_{}".format  # (widget key) its last value, kept while its view is not shown (Streamlit drops it)
restored = "_restored_{}".format  # (widget key) set once the widget has been seeded from the link
click_seen = "_{}_seen".format  # (chart key) the last click on the heatmap already acted on
live = "_live_{}".format  # (run) whether the pages follow it (the Live toggle's value, kept across views)
live_toggle = "live_toggle_{}".format  # (run) the Live toggle
AWAITED_RUN = "_awaited_run"  # a live link's run that has no step yet: selected when its first one lands
alerts_seen = "_alerts_seen_{}".format  # (run) the monitor alerts already drawn: a new one is also a toast

# ---- session keys of the widgets in app/ui/ (one per view, from the view's prefix) --------------------

channel_picker = "{}_channel".format  # (view)
form_field = "{}_{}_{}".format  # (form, estimator, field) the widget of one config field in a parameter form
form_open = "{}_open".format  # (form) its lazy expander open or not (widgets.estimator_parameters)
scale_mode = "{}_scale".format  # (view)
scale_lock = "{}_zlock".format  # (view) the locked colour half-width (None: unlocked)
scale_lock_toggle = "{}_lock_toggle".format  # (view)

# ---- session keys of the views ------------------------------------------------------------------------

EXPLORER_ESTIMATOR = "explorer_estimator"
EXPLORER_FORM = "explorer_cfg"
EXPLORER_VERSUS = "explorer_compare"
EXPLORER_CREDIT = "explorer_credit"
TRENDS_CREDIT = "trends_credit"
EXPLORER_SEARCH = "explorer_search"
EXPLORER_SORT = "explorer_sort"
EXPLORER_DESCENDING = "explorer_desc"
EXPLORER_PAGE_SIZE = "explorer_size"
EXPLORER_PAGE_NO = "explorer_page_no"
EXPLORER_SIGNATURE = "_explorer_signature"  # the query of the last rerun: a new one starts at page 1
EXPLORER_IDS = "_explorer_ids"  # the rollout ids of the rows shown
EXPLORER_TABLE = "explorer_table"
EXPLORER_COLUMNS_HELP = "explorer_columns_help"  # the "What these columns mean" expander (open)
EXPLORER_LANDED_OPEN = "explorer_landed_open"  # "Did the credit land?" (open)
EXPLORER_WHERE_CLEARED = "explorer_where_cleared"  # the alert's filter was cleared
EXPLORER_WHERE = "_explorer_where"  # the filter a link in this session asked for (kept until cleared)
EXPLORER_ALERT_LINK = "_explorer_alert_link"  # the alert link whose sort was applied

TRENDS_ESTIMATOR = "trends_estimator"
TRENDS_FORM = "trends_cfg"
EXPLORER_FILTERS_OPEN = "explorer_filters_open"  # the flag and range filters (widgets.lazy_expander)
TRENDS_NUMBERS_OPEN = "trends_numbers_open"  # the lazy expanders (widgets.lazy_expander): open or not
TRENDS_LANDED_OPEN = "trends_landed_open"
RUNS_COMPARED = "runs_compared"  # the runs side by side (the sidebar multiselect)
RUNS_COMPARED_FOR = "_runs_compared_for"  # the run selected when they were last drawn
TRENDS_SMOOTH = "trends_smooth"
TRENDS_X = "trends_x"
RUNS_COMPARE_ESTIMATOR = "runs_compare_estimator"
RUNS_COMPARE_SAME_OPEN = "runs_compare_same_open"  # the rows the same on every run (widgets.lazy_expander)

ROLLOUT_ESTIMATOR = "rollout_estimator"
ROLLOUT_FORM = "rollout_cfg"
ROLLOUT_POSITION = "rollout_pos"
ROLLOUT_TEXT_CLICKED = "rollout_text_clicked"  # a token clicked in the text, or the cliff token selected
ROLLOUT_HEATMAP = "rollout_heatmap"
ROLLOUT_WINDOW = "rollout_window"
ROLLOUT_ATTRIBUTION = "rollout_attribution"  # the attribution asked for: (run, rollout, pos, scope)
ROLLOUT_ATTRIBUTION_SCOPE = "rollout_attribution_scope"  # group or step
ROLLOUT_ATTRIBUTION_SELF = "rollout_attribution_self"  # leave the token's own share out of the colours

GROUP_ESTIMATOR = "group_estimator"
GROUP_OPEN = "group_open"  # the response picked to open in the Rollout view
GROUP_WINDOW = "group_window"

COMPARE_ESTIMATORS = "compare_estimators"
COMPARE_FORM = "compare_cfg"
COMPARE_LANDED_OPEN = "compare_landed_open"  # "Which estimator's credit predicts the realized change?" (open)
COMPARE_DIFF_A = "compare_diff_a"
COMPARE_DIFF_B = "compare_diff_b"
COMPARE_WINDOW = "compare_window"
COMPARE_NUMBERS_OPEN = "compare_numbers_open"
COMPARE_CREDIT = "compare_credit"
CLASS_EDITOR_OPEN = "class_editor_open"

TUNE_ESTIMATOR = "tune_estimator"
TUNE_APPLIED = "_tune_applied"  # the β the Apply button set, until the whole page has been drawn with them
TUNE_BASELINE = "tune_baseline"
TUNE_AGAINST = "tune_against"
TUNE_ETA = "tune_eta"
COMPARE_TAB = "compare_tab"  # small multiples, difference of two, or agreement and mass (sections.lazy_tabs)
GROUP_TAB = "group_tab"  # the responses aligned, or the prefix tree (sections.lazy_tabs)
ORACLE_TAB = "oracle_tab"  # the chart, or the table (sections.lazy_tabs)
RESAMPLE_TAB = "resample_tab"  # the values, or the model-based scores (sections.lazy_tabs)
ROLLOUT_TAB = "rollout_tab"  # why this credit, or the per-token strips (sections.lazy_tabs)
TRENDS_TAB = "trends_tab"  # rewards, where credit goes, or length/entropy/KL (sections.lazy_tabs)
TUNE_TAB = "tune_tab"  # β per channel, or the dual ascent replay (sections.lazy_tabs)
TUNE_NORMALIZATION_OPEN = "tune_normalization_open"  # the normalization per channel (widgets.lazy_expander)
TUNE_REPLAY_MODE = "tune_mode"
TUNE_WINDOW = "tune_window"
TUNE_REPLAY_TABLE_OPEN = "tune_replay_table_open"


tune_beta = "tune_beta_{}".format  # (channel)
tune_normalization = "tune_norm_{}".format  # (channel)
tune_tau = "tune_tau_{}".format  # (channel)
tune_violation = "tune_viol_{}".format  # (channel)
TUNED_BETAS = "_tuned_betas"  # {"run": run, "betas": {channel: β}}: Apply on the Tune view, for every view
TUNE_EFFECT_OF = "tune_effect_of"

RESAMPLE_POSITIONS = "resample_positions"
RESAMPLE_SUGGESTED = "resample_suggested"  # the kind of the last suggestion
RESAMPLE_SAMPLES = "resample_m"
RESAMPLE_ENGINE = "resample_engine"
RESAMPLE_HEATMAP = "resample_heatmap"
RESAMPLE_WINDOW = "resample_window"
RESAMPLE_JOB = "resample_job"  # the resampling job of this session
RESAMPLE_SHOWN = "_resample_shown"  # the last resampling job followed to its end
MODEL_CREDIT_JOB = "model_credit_job"
MODEL_CREDIT_SHOWN = "_mc_shown"

ORACLE_ESTIMATORS = "oracle_estimators"
ORACLE_PIPELINE = "oracle_pipeline"

RUNS_FLASH = "runs_flash"  # the message of the last import, delete or main-channel change
COMPARE_SAME_PROMPT = "compare_same_prompt"  # the prompt shown across the runs side by side
COMPARE_SAME_STEP = "compare_same_step"
