"""Did the credit land, in the views (AppTest, the bundled store): the Rollout view's "realized Δ log π" row
under the credit rows holds `creditlens landed`'s Δ for the rollout's tokens; a run without a realized change
has no such row; the Explorer, Trends and Compare sections show the numbers of `backend.credit.landed`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app import keys
from backend.credit import landed
from backend.store import store_handle
from backend.store.landed_queries import REALIZED_ROW
from tests.app.conftest import chart, open_app


def _row_names(spec: dict) -> str:
    return json.dumps(spec, ensure_ascii=False)


def test_the_rollout_view_draws_the_realized_row_under_the_credit_rows(app_db):
    at = open_app(app_db, "rollout", {"run": "kl-0.0", "rollout": "2"})
    spec = _row_names(chart(at, "rollout_heatmap"))
    assert REALIZED_ROW in spec
    assert any(f"{REALIZED_ROW} has its own scale" in c.value for c in at.caption)
    # the row's values are the command's Δ for this rollout
    from app.view_data import rollout as rollout_data  # noqa: PLC0415 - needs Streamlit's cache, here

    delta = rollout_data.realized_delta.__wrapped__(str(app_db), "kl-0.0", 2)
    tokens = landed.landed_tokens(store_handle(app_db), "kl-0.0").tokens
    np.testing.assert_allclose(delta, tokens[tokens["rollout_id"] == 2]["delta"].to_numpy())
    plain = open_app(app_db, "rollout", {"run": "demo", "rollout": "0"})
    assert REALIZED_ROW not in _row_names(chart(plain, "rollout_heatmap"))


@pytest.mark.parametrize(
    ("page", "query", "key", "says"),
    [
        ("explorer", {"run": "kl-0.0"}, keys.EXPLORER_LANDED_OPEN, "landed_sign"),
        ("trends", {"run": "kl-0.0"}, keys.TRENDS_LANDED_OPEN, "sign_agreement"),
        (
            "compare",
            {"run": "kl-0.0", "rollout": "2", "ests": "as_trained,grpo"},
            keys.COMPARE_LANDED_OPEN,
            "sign_agreement",
        ),
    ],
)
def test_each_view_section_shows_the_landed_numbers(app_db, page, query, key, says):
    at = open_app(app_db, page, query, opened=(key,))
    frames = [d.value for d in at.dataframe]
    shown = [f for f in frames if says in f.columns]
    assert shown, [list(f.columns) for f in frames]
    handle = store_handle(app_db)
    if page == "explorer":
        want = landed.by_rollout(landed.landed_tokens(handle, "kl-0.0"))
        np.testing.assert_allclose(shown[0]["landed_sign"], want["landed_sign"])
    elif page == "trends":
        want = landed.by_step(landed.landed_tokens(handle, "kl-0.0"))
        np.testing.assert_allclose(shown[0]["sign_agreement"], want["sign_agreement"])
    else:
        want = landed.by_estimator(handle, "kl-0.0", ["as_trained", "grpo"])
        np.testing.assert_allclose(shown[0]["spearman"], want["spearman"])
    closed = open_app(
        app_db, page, {"run": "demo", **{k: v for k, v in query.items() if k != "run"}}, opened=(key,)
    )
    assert any("no realized change yet" in i.value for i in closed.info)
