"""One browser history entry per view change, so Back returns to the previous view.

Streamlit's page pushes a history entry for every change of the query string (`st.query_params`), on top of
the one it pushes when the view (the path) changes. Every view writes its choices into the URL when a run
ends (`state.flush_url`), so opening a view pushed two entries (`/rollout`, then `/rollout?run=…`) and Back
landed on the first: the same view. In the page, a push that keeps the path becomes a replace: the URL still
follows every choice (a bookmark or a shared link holds the view), and only a change of view adds an entry.
"""

from __future__ import annotations

import streamlit as st

_SCRIPT = """<script>
(() => {
  if (window.__creditlensHistory) return;
  window.__creditlensHistory = true;
  const push = window.history.pushState.bind(window.history);
  window.history.pushState = (state, title, url) => {
    const to = url == null ? window.location : new URL(url, window.location.href);
    if (to.pathname === window.location.pathname) return window.history.replaceState(state, title, url);
    return push(state, title, url);
  };
})();
</script>"""


def one_entry_per_view() -> None:
    """Install, once per browser tab, the rule above (a script in the page, drawn in the sidebar)."""
    st.sidebar.html(_SCRIPT, unsafe_allow_javascript=True)
