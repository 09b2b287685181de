"""The Rollout view's "Whose credit moved this token": nothing is computed until asked; then the numbers are
those of `attribute` (the function `creditlens attribution` calls), drawn over the group's responses. A step
whose checkpoint is unknown says so instead of offering the button."""

from __future__ import annotations

import json

from app import keys
from backend.store import Store, store_handle
from backend.views.attribution import attribute
from tests.app.conftest import open_app, open_tab

TAB = "Whose credit moved this token"


def _charts(at) -> list[str]:
    return [c.proto.id for c in at.get("plotly_chart")]


def test_the_attribution_is_drawn_on_demand_with_the_commands_numbers(app_db):
    # rollout 2 of kl-0.2 is in step 1, sampled by the demo policy (the bundled run's one checkpoint)
    at = open_app(app_db, "rollout", {"run": "kl-0.2", "rollout": "2", "pos": "5"})
    open_tab(at, keys.ROLLOUT_TAB, TAB)
    assert not any("rollout_attribution_heatmap" in c for c in _charts(at))  # on demand only
    at.button(key="rollout_attribution_run").click().run()
    assert not at.exception, [e.message for e in at.exception]

    expected = attribute(store_handle(app_db), "kl-0.2", 2, 5)
    shown = " ".join(m.value for m in at.markdown)
    assert f"**{expected.predicted:+.3g}**" in shown
    table = at.dataframe[0].value
    top = expected.shares.loc[expected.shares["share"].abs().idxmax()]
    assert (table.iloc[0]["rollout_id"], table.iloc[0]["pos"]) == (top["rollout_id"], top["pos"])
    assert table.iloc[0]["share"] == top["share"]
    (figure,) = [
        json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
        if "rollout_attribution_heatmap" in c.proto.id
    ]
    labels = json.dumps(figure["layout"])
    for rollout in sorted(set(expected.shares["rollout_id"])):  # one row per response of the group
        assert f"#{rollout} " in labels
    assert "(selected)" in labels
    assert figure["layout"]["coloraxis"]["colorbar"]["title"]["text"] == "share"


def test_a_step_without_its_checkpoint_offers_no_attribution(app_db):
    with Store(app_db) as store:  # whatever the bundled run ships, step 2's checkpoint is unknown here
        store.con.execute(
            "DELETE FROM step_checkpoints WHERE run_id = ? AND step = 2", [store.run_id("kl-0.2")]
        )
    at = open_app(app_db, "rollout", {"run": "kl-0.2", "rollout": "12", "pos": "1"})
    open_tab(at, keys.ROLLOUT_TAB, TAB)
    assert any("No model for this step" in i.value and "step 2 is unknown" in i.value for i in at.info)
    assert not [b for b in at.button if b.key == "rollout_attribution_run"]
