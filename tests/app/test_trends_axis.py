"""Trends over several runs by the tokens they trained on (issue 45 item 1): `?x=tokens_seen` draws each run's
lines against its response tokens through the step, the `tokens_seen` column of `creditlens trends`."""

from __future__ import annotations

import base64
import json

import numpy as np

from tests.app.conftest import open_app
from tests.conftest import run_cli_here


def test_the_runs_can_be_drawn_by_tokens_seen(app_db):
    at = open_app(app_db, "trends", {"run": "kl-0.0", "runs": "kl-0.0,kl-0.2", "x": "tokens_seen"})
    (axis,) = [r for r in at.radio if r.label == "x axis"]
    assert axis.value == "tokens_seen"
    listed = run_cli_here("trends", "--db", app_db, "--run", "kl-0.0", "--run", "kl-0.2", "--json")
    rows = json.loads(listed.stdout)
    (reward,) = [c for c in at.get("plotly_chart") if "reward (sum of channel scores)" in c.proto.spec]
    figure = json.loads(reward.proto.spec)
    lines = {t["name"]: _values(t["x"]) for t in figure["data"] if t.get("showlegend", True)}  # not the raw
    for run in ("kl-0.0", "kl-0.2"):
        assert lines[run] == [r["tokens_seen"] for r in rows if r["run"] == run]
    assert figure["layout"]["xaxis"]["title"]["text"] == "response tokens seen"


def _values(x) -> list[float]:
    """A trace's x as numbers: Plotly sends numeric arrays as base64 typed arrays."""
    if isinstance(x, dict):
        return np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"]).tolist()
    return list(x)
