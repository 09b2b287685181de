"""The views, in the order the navigation shows them: one list for the entry point (`app/main.py`), the
links between views, the server's warm-up (`app/server/warmup.py`) and the app benchmark."""

from __future__ import annotations

from pathlib import Path

VIEW_DIR = Path(__file__).resolve().parents[1] / "pages"
VIEWS = (  # (script in pages/, title, url path, icon); the first is the landing page of a run
    ("explorer.py", "Explorer", "explorer", ":material/table_rows:"),
    ("trends.py", "Trends", "trends", ":material/monitoring:"),
    ("rollout.py", "Rollout", "rollout", ":material/grid_on:"),
    ("group.py", "Group", "group", ":material/account_tree:"),
    ("compare.py", "Compare", "compare", ":material/compare:"),
    ("tune.py", "Tune", "tune", ":material/tune:"),
    ("resample.py", "Resample", "resample", ":material/casino:"),
    ("oracle.py", "Oracle", "oracle", ":material/verified:"),
    ("runs.py", "Runs", "runs", ":material/storage:"),
    ("runs_compare.py", "Runs comparison", "runs-compare", ":material/difference:"),
)


def script(url_path: str) -> Path:
    """The script of the view at `url_path` (for `st.switch_page` and `st.page_link`)."""
    return VIEW_DIR / next(s for s, _, path, _ in VIEWS if path == url_path)
