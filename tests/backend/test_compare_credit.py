"""Compare reads one credit, signed: the credit mass by token class splits into credit (A > 0) and penalty
(A < 0) per class (hand-checked on a tiny batch), the choices come from one backend list, and `creditlens
compare --json` prints the numbers the Compare view draws."""

from __future__ import annotations

import json

import numpy as np
import pytest

from backend.credit import credit_shares
from backend.store import StoreHandle
from backend.views import compare
from tests.conftest import run_cli_here


def test_signed_mass_by_class_by_hand():
    # two responses, three tokens; the second's last token is padding (outside the mask)
    advantages = {"a": np.array([[1.0, -2.0, 0.5], [-0.5, 3.0, 9.0]])}
    classes = np.array([[0, 1, 1], [0, 0, -1]])  # class 0: "x", class 1: "y"
    mask = np.array([[True, True, True], [True, True, False]])
    frame = credit_shares.signed_mass_by_class(advantages, classes, mask, ("x", "y"))
    got = frame.set_index("token_class")
    # Σ|A| over the mask = 1 + 2 + 0.5 + 0.5 + 3 = 7 (the padding's 9 never counts)
    # x: tokens 1.0, -0.5, 3.0 -> credit 4.0, penalty 0.5; y: -2.0, 0.5 -> credit 0.5, penalty 2.0
    assert got.loc["x", "credit_mass"] == pytest.approx(4.0) and got.loc[
        "x", "penalty_mass"
    ] == pytest.approx(0.5)
    assert got.loc["y", "credit_mass"] == pytest.approx(0.5) and got.loc[
        "y", "penalty_mass"
    ] == pytest.approx(2.0)
    assert got.loc["x", "credit_share"] == pytest.approx(4 / 7) and got.loc[
        "x", "penalty_share"
    ] == pytest.approx(0.5 / 7)
    assert got.loc["y", "credit_share"] == pytest.approx(0.5 / 7) and got.loc[
        "y", "penalty_share"
    ] == pytest.approx(2 / 7)
    assert got["abs_share"].sum() == pytest.approx(1.0)
    assert got.loc["x", "token_share"] == pytest.approx(3 / 5) and got.loc[
        "y", "token_share"
    ] == pytest.approx(2 / 5)
    # the unsigned share of before is their sum
    old = credit_shares.credit_mass_by_class(advantages, classes, mask, ("x", "y")).set_index("token_class")
    np.testing.assert_allclose(got["abs_share"], old["credit_share"])
    silent = credit_shares.signed_mass_by_class({"z": np.zeros((2, 3))}, classes, mask, ("x", "y"))
    assert silent["credit_share"].isna().all() and (silent["credit_mass"] == 0).all()


def test_the_credit_choices_are_one_backend_list(bundled_db):
    handle = StoreHandle(bundled_db)
    with handle.read() as store:
        batch = store.load_batch("demo", group_ids=[0])
    keys = [c.key for c in compare.credit_choices(batch)]
    assert keys[0] == "final" and "channel:task" in keys and "channel:format" in keys and "summed" in keys
    assert keys.index("channel:task") < keys.index("channel:format")  # the outcome channels first


def test_compare_prints_the_signed_mass_the_view_draws_and_filler_is_penalty_on_demo_357(bundled_db):
    ests = ["grpo", "entropy"]
    args = ["compare", "--db", bundled_db, "--run", "demo", "--rollout", 357]
    done = run_cli_here(*args, *[a for e in ests for a in ("--estimator", e)], "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["credit"] == "final" and out["credit_choices"][0]["key"] == "final"
    mass = {(r["estimator"], r["token_class"]): r for r in out["mass"]}
    filler = mass[("grpo", "filler")]
    # GRPO's final A on filler is the format and style penalties: no credit there, all penalty
    assert filler["credit_share"] == 0 and filler["penalty_share"] > 0.3
    for r in out["mass"]:
        assert r["credit_share"] + r["penalty_share"] == pytest.approx(r["abs_share"])
    view = compare.compare_rollout(StoreHandle(bundled_db), "demo", 357, [(e, ()) for e in ests])
    np.testing.assert_allclose(
        view["mass"]["penalty_share"], [r["penalty_share"] for r in out["mass"]], rtol=1e-12
    )
    np.testing.assert_allclose(view["rollout"]["grpo"], out["rows"]["grpo"], rtol=1e-6)
    task = json.loads(run_cli_here(*args, "--estimator", "grpo", "--credit", "channel:task", "--json").stdout)
    assert {r["token_class"]: r["credit_share"] for r in task["mass"]}["filler"] > 0  # task alone differs
    bad = run_cli_here(*args, "--estimator", "grpo", "--credit", "channel:nope")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "channel:task" in bad.stderr
