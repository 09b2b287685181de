"""Issue 43's rest: Compare's robust colour scale names what it saturates, a per-row toggle; Compare's class
mass is of A_final; the tuned β reaches every view whose numbers weigh channels, with its mark; the Group
header is the group's; descriptions are cut at a word boundary."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.ui import fmt, scales, widgets
from app.view_data import compare as compare_data
from backend.estimators import registry
from backend.store import Store
from tests.app.conftest import chart, open_app
from tests.conftest import run_cli_here

ROLLOUT = 354  # the demo's filler rollout: its "let me think" tail carries the format and style penalties
TUNED = {"run": "demo", "tuned": "format:0,style:0"}


def _spiky(n: int = 40, peak: float = 50.0) -> np.ndarray:
    rng = np.random.default_rng(0)
    values = rng.normal(0, 0.3, n)
    values[:3] = peak
    return values


def test_an_added_estimator_does_not_wash_out_the_others_and_its_saturation_is_named():
    rows = {"grpo": np.full(40, -2.475), "prefix_tree": np.linspace(-3, 1, 40)}
    before = scales.scale_peaks(rows, "robust")["grpo"]
    rows["entropy"] = 20 * _spiky()  # 20 times the others' credit, with its own spikes
    after = scales.scale_peaks(rows, "robust")["grpo"]
    assert scales.scale_peaks(rows, "shared")["grpo"] > 300  # the old default: grpo near white
    assert after == pytest.approx(before, rel=0.25)  # one added row moves it by one rank at most
    note = scales.active_scale(rows, "robust")
    beyond = int((np.abs(rows["entropy"]) > after).sum())
    assert f"entropy saturates: {beyond} tokens beyond ±{fmt.significant(after, 2, signed=False)}" in note
    assert "max |A| 1000" in note
    assert "grpo saturates" not in note


def test_descriptions_are_cut_at_a_word_boundary_never_mid_word():
    for name in registry.names():
        shown = widgets.described(name)
        assert len(shown) <= len(name) + 3 + 70, shown
        if shown.endswith("…"):
            kept = shown[len(name) + 3 : -1]
            full = " ".join(registry.get(name).description.split())
            assert full.startswith(kept) and full[len(kept)] in " ,;:(—-", (name, shown)
    assert "Dr. GRPO" in widgets.described("dr_grpo")  # "Dr." is not a sentence end
    assert fmt.clip_words("alpha beta gamma", 12) == "alpha beta…"


def test_compare_defaults_to_the_robust_scale_one_toggle_from_per_row(app_db):
    query = {"run": "demo", "rollout": str(ROLLOUT), "ests": "grpo,entropy,prefix_tree"}
    at = open_app(app_db, "compare", query)
    assert not at.exception, at.exception
    captions = " ".join(c.value for c in at.caption)
    assert "robust shared" in captions and "entropy saturates:" in captions, captions
    assert at.query_params["scale"] in ("robust", ["robust"])
    at.toggle(key="compare_scale").set_value(True).run()
    assert at.query_params["scale"] in ("row", ["row"])
    ticks = chart(at, "compare_multiples")["layout"]["yaxis"]["ticktext"]
    assert any("±" in t for t in ticks), ticks  # each row labelled with its own range


def test_compare_class_mass_is_of_final_a_by_default_and_signed(app_db):
    with Store(app_db, read_only=True) as store:
        group = int(store.rollout_index("demo").set_index("rollout_id").loc[ROLLOUT, "group_id"])
    ests = (("grpo", (("channel", "task"),)),)
    final = compare_data.compare(str(app_db), "demo", group, ROLLOUT, ests).get("mass")
    alone = compare_data.compare(str(app_db), "demo", group, ROLLOUT, ests, credit="channel:task")["mass"]
    share = {m: f.set_index("token_class") for m, f in (("final", final), ("alone", alone))}
    # the format and style penalties land on filler: more of Σ|A| there, and all of it penalty
    assert share["final"]["abs_share"]["filler"] > share["alone"]["abs_share"]["filler"] + 0.02
    assert share["final"]["penalty_share"]["filler"] > 0.3 and share["final"]["credit_share"]["filler"] == 0
    tuned = compare_data.compare(
        str(app_db), "demo", group, ROLLOUT, ests, betas=(("format", 0.0), ("style", 0.0))
    )
    tuned_filler = tuned["mass"].set_index("token_class")["penalty_share"]["filler"]
    assert tuned_filler < share["final"]["penalty_share"]["filler"] - 0.02  # β 0 on the penalties: less


def _cli_rows(db, *args) -> list[dict]:
    done = run_cli_here(*args, "--db", str(db), "--run", "demo", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_tuned_beta_reaches_the_explorer_as_rollouts_beta_gives_it(app_db):
    at = open_app(app_db, "explorer", TUNED)
    assert not at.exception, at.exception
    assert any("tuned β" in i.value for i in at.info), [i.value for i in at.info]
    table = at.dataframe[0].value.set_index("rollout_id")
    tuned = _cli_rows(app_db, "rollouts", "--estimator", "grpo", "--beta", "format=0", "--beta", "style=0")
    plain = _cli_rows(app_db, "rollouts", "--estimator", "grpo")
    default = next(r for r in plain if r["rollout_id"] in table.index and (r["share_filler"] or 0) > 0.1)
    rid = default["rollout_id"]
    expected = next(r for r in tuned if r["rollout_id"] == rid)
    assert table.loc[rid, "share_filler"] == pytest.approx(expected["share_filler"], abs=1e-9)
    assert expected["share_filler"] != pytest.approx(default["share_filler"], abs=1e-3)  # β changed it


def test_the_tuned_beta_reaches_group_compare_and_trends_with_its_mark(app_db):
    for page in ("group", "compare", "trends"):
        at = open_app(app_db, page, {**TUNED, "rollout": str(ROLLOUT)})
        assert not at.exception, (page, at.exception)
        assert any("tuned β" in i.value for i in at.info), page
    at = open_app(app_db, "group", {**TUNED, "rollout": str(ROLLOUT)})
    label = next(t for t in chart(at, "group_heatmap")["layout"]["yaxis"]["ticktext"] if f"#{ROLLOUT}" in t)
    assert label
    explained = json.loads(
        run_cli_here(
            "explain",
            "--db",
            str(app_db),
            "--run",
            "demo",
            "--rollout",
            str(ROLLOUT),
            "--estimator",
            "grpo",
            "--beta",
            "format=0",
            "--beta",
            "style=0",
            "--json",
        ).stdout
    )
    from tests.app.test_one_truth_views import heatmap_row  # noqa: PLC0415

    shown = heatmap_row(chart(at, "group_heatmap"), label.split("  [")[0])
    np.testing.assert_allclose(shown, explained["final"], atol=1e-5)


def test_the_group_header_is_the_groups_not_one_rollouts(app_db):
    at = open_app(app_db, "group", {"run": "demo", "rollout": str(ROLLOUT)})
    assert not at.exception, at.exception
    with Store(app_db, read_only=True) as store:
        group = int(store.rollout_index("demo").set_index("rollout_id").loc[ROLLOUT, "group_id"])
    done = run_cli_here("group", "--db", str(app_db), "--run", "demo", "--group", str(group), "--json")
    facts = json.loads(done.stdout)
    captions = " ".join(c.value for c in at.caption).replace("\\", "")  # markdown escapes
    assert f"{facts['rollouts']} responses" in captions
    task = next(c for c in facts["channels"] if c["channel"] == "task")
    assert "mean (min to max)" in captions
    assert f"task {fmt.nice(task['mean'])} ({fmt.nice(task['min'])} to {fmt.nice(task['max'])})" in captions
