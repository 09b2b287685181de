"""Credit Lens: the Streamlit entry point.

`streamlit run app/main.py -- --db DB` (or `creditlens app`, which serves it behind the token gate of
`app/server/`). Builds the navigation over the view scripts in `pages/` (`app/navigation.py`), resolves
the shared selection (run, rollout) and hands over to the chosen view.
"""

from __future__ import annotations

import streamlit as st

from app import data, keys, state
from app.navigation import VIEW_DIR, VIEWS
from app.server import auth
from app.ui import history, live

st.set_page_config(page_title="Credit Lens", page_icon=":material/grid_on:", layout="wide")
settings = data.settings()
# The token gate (app/server/gate.py) already refuses the WebSocket without the access cookie; this check
# keeps the data closed when the script is served some other way (e.g. `streamlit run app/main.py`).
if settings.token and not auth.cookie_matches(
    st.context.cookies.get(auth.cookie_name(st.get_option("server.port"))), settings.token
):
    st.title("Credit Lens · access token required")
    st.write("Open the address that `creditlens app` printed when it started (it carries the token).")
    st.stop()
if settings.read_only:
    st.sidebar.caption(":material/lock: Read-only server: browsing, estimators and explanations only.")
# The landing view is served at `/` and, through a hidden second page on the same script, at its own path
# (`/explorer`): Streamlit serves a default page only at the root. The visible entry is the root one, so the
# sidebar marks it on the landing page, and links to the script (first registered) go there.
landing_script, landing_title, landing_path, _ = VIEWS[0]
navigation = st.navigation(
    [
        st.Page(
            str(VIEW_DIR / script),
            title=title,
            url_path=f"{url_path}-landing" if i == 0 else url_path,
            icon=icon,
            default=(i == 0),
        )
        for i, (script, title, url_path, icon) in enumerate(VIEWS)
    ]
    + [
        st.Page(
            str(VIEW_DIR / landing_script), title=landing_title, url_path=landing_path, visibility="hidden"
        )
    ]
)
data.refresh_if_store_changed(data.db_path())  # another process may have imported or deleted a run
# The run's reads share one read-only connection (backend/store/handle.py: `kept_open`), closed when it ends.
with data.store_handle(data.db_path()).kept_open():
    history.one_entry_per_view()
    state.capture_live_url()
    live.take_awaited_run(data.db_path())  # a live link's run whose first step has just landed
    st.session_state[keys.SELECTION] = state.init_selection()
    live.wait_for_run(data.db_path())
    state.name_unknown_view(
        {path: title for _, title, path, _ in VIEWS}, landing_title, also=(f"{landing_path}-landing",)
    )
    st.session_state[keys.VIEW_SHOWN] = navigation.title
    # A view that stops early does it through `state.stop`, which writes the URL first: after `st.stop`
    # nothing more reaches the browser.
    navigation.run()
    state.end_run()  # the URL written once per run (state.publish); not before st.rerun or st.switch_page
