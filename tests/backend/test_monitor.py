"""Credit-health monitors on runs made by the oracle generator (backend/evaluation/synthetic.py): a healthy
run that improves slowly (entropy drifting down, accuracy and KL up, lengths changing a little, a few
truncated and garbled responses, filler that nobody pays for) raises nothing, and each planted pathology,
switched on at a known step, is found by its detector at that step, with rollouts that show it."""

from __future__ import annotations

import argparse
import json
import math
import random
import tomllib
from pathlib import Path

import numpy as np
import pytest

from backend.cli import monitor as cli_monitor
from backend.core.errors import InputError
from backend.evaluation import synthetic
from backend.ingest import import_records
from backend.monitor import change_point
from backend.monitor import config as monitor_config
from backend.monitor import monitors as monitor
from backend.monitor.change_point import OnsetRule, find_onset
from backend.store import Store, StoreHandle
from backend.views import explorer
from tests.conftest import run_cli_here

STEPS, ONSET, PROMPTS, GROUP = 14, 9, 5, 8
FILLER = [
    "i hope ",
    "this helps",
    "basically",
    "clearly",
    "obviously",
    "essentially",
    "to be honest",
    "in summary",
]
PLANTS = (
    "class_share",
    "channel_takeover",
    "entropy_collapse",
    "kl_acceleration",
    "length_drift",
    "truncation",
    "zero_variance",
    "repetition",
    "garbled",
    "logged_gap",
)


def _grpo_z(task: list[float]) -> list[float]:
    """GRPO's Z of one group (unbiased std + 1e-6): what a trainer logs as its advantage."""
    r = np.asarray(task, dtype=np.float64)
    std = r.std(ddof=1) if len(r) > 1 else 0.0
    return ((r - r.mean()) / (std + 1e-6)).tolist()


def monitor_records(plant: str | None = None, seed: int = 0, onset: int = ONSET) -> list[dict]:
    """A run of STEPS steps (PROMPTS groups of GROUP per step) from `synthetic.native_records`, with the
    healthy noise and drifts of the module docstring, and `plant` switched on from step `onset`."""
    rng = random.Random(seed)
    records = []
    for step in range(STEPS):
        planted = plant if plant is not None and step >= onset else None  # the pathology on at this step
        overrides = {}
        if planted == "length_drift":
            overrides["length"] = 80
        step_records = list(synthetic.native_records([1000 * seed + step], PROMPTS, GROUP, **overrides))
        for rec in step_records:
            cut = _trim_and_drift(rec, rng, step, onset, planted)
            _reward_and_text(rec, rng, step, cut, planted)
        _log_advantages(step_records, planted)
        records += step_records
    return records


def _trim_and_drift(rec: dict, rng: random.Random, step: int, onset: int, planted: str | None) -> int:
    """Cut `rec` to a random length and drift its entropies and KL as a healthy run does, with the
    channel, entropy and KL plants; returns the length."""
    rec["step"] = step
    rec["group"] = f"{step}-{rec['group']}"
    n = len(rec["token_ids"])
    cut = rng.randint(min(36 + step // 6, n), n)  # healthy: lengths vary and creep up a little
    for name in ("token_ids", "tokens", "entropies", "logprobs"):
        rec[name] = rec[name][:cut]
    penalty = 6.0 if planted == "channel_takeover" else 1.0  # the style rule's scale broke
    rec["token_rewards"] = {"style": [penalty * r for r in rec["token_rewards"]["style"][:cut]]}
    rec["extras"] = {k: rec["extras"][k][:cut] for k in ("key_mask", "style_mask")}
    entropy_scale = (1 - 0.01 * step) * (0.35 if planted == "entropy_collapse" else 1.0)
    rec["entropies"] = [e * entropy_scale for e in rec["entropies"]]
    kl = 0.01 * step + (0.05 * (step - onset + 1) if planted == "kl_acceleration" else 0.0)
    rec["ref_logprobs"] = [lp - kl + rng.gauss(0.0, 0.05) for lp in rec["logprobs"]]
    return cut


def _reward_and_text(rec: dict, rng: random.Random, step: int, cut: int, planted: str | None) -> None:
    """The task reward improving slowly, filler, repeated loops, garbled tokens and truncation, each at its
    healthy rate or, planted, at its pathological one."""
    task = rec["rewards"]["task"]
    if rng.random() < 0.01 * step:  # healthy: accuracy improves slowly
        task = 1.0
    if rng.random() < 0.2:  # filler nobody pays for, unless the plant is on
        rec["tokens"][-len(FILLER) :] = FILLER
        rec["token_ids"][-len(FILLER) :] = range(900, 900 + len(FILLER))
        if planted == "class_share":  # a judge starts paying for it
            task += 1.0
    if planted == "repetition" and rng.random() < 0.4:
        loop = rec["token_ids"][:12]
        rec["token_ids"] = (loop * 8)[:cut]
        rec["tokens"] = (rec["tokens"][:12] * 8)[:cut]
    garbled = rng.random() < (0.3 if planted == "garbled" else 0.02)
    if garbled:
        for pos in rng.sample(range(cut), 5 if planted == "garbled" else 1):
            rec["tokens"][pos] = rng.choice(["pаris", "\ufffd", "a\x07"])
    rec["response"] = " ".join(rec["tokens"])
    truncated = rng.random() < (0.35 if planted == "truncation" else 0.05)
    rec["meta"] = {**rec["meta"], "truncated": truncated}
    rec["rewards"] = {**rec["rewards"], "task": task}


def _log_advantages(step_records: list[dict], planted: str | None) -> None:
    """Each record's logged advantage: GRPO's Z over its group (the zero-variance and logged-gap plants
    change the rewards and the formula)."""
    groups: dict[str, list[dict]] = {}
    for rec in step_records:
        groups.setdefault(rec["group"], []).append(rec)
    for members in groups.values():
        if planted == "zero_variance":
            for rec in members:
                rec["rewards"]["task"] = 1.0
        task = [rec["rewards"]["task"] for rec in members]
        logged = _grpo_z(task)
        if planted == "logged_gap":  # the trainer stopped dividing by the group's std
            logged = (np.asarray(task) - np.mean(task)).tolist()
        for rec, value in zip(members, logged, strict=True):
            rec["logged_advantage"] = value


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> StoreHandle:
    """One store with a healthy run (two seeds) and one run per planted pathology."""
    db = tmp_path_factory.mktemp("monitor") / "runs.duckdb"
    with Store(db) as store:
        for seed in (0, 1):
            import_records(store, f"healthy{seed}", monitor_records(None, seed), content_key=f"healthy{seed}")
        for plant in PLANTS:
            import_records(store, plant, monitor_records(plant, seed=2), content_key=plant)
    return StoreHandle(db)


@pytest.fixture(scope="module")
def report(runs):
    """run name -> its report under the default settings (each run monitored once per module)."""
    cache: dict[str, monitor.MonitorReport] = {}

    def get(name: str) -> monitor.MonitorReport:
        if name not in cache:
            cache[name] = monitor.run_monitors(runs, name)
        return cache[name]

    return get


# ---- the onset rule ----------------------------------------------------------------------------------


def test_onset_is_the_first_persistent_departure():
    rng = np.random.default_rng(0)
    x = 1.0 + 0.01 * rng.standard_normal(30)
    x[20:] += 0.5
    onset = find_onset(x, OnsetRule())
    assert onset is not None and onset.index == 20 and onset.severe and not onset.pending
    assert onset.baseline == pytest.approx(1.0, abs=0.02)


def test_a_blip_is_not_an_onset_and_a_trend_stays_quiet():
    rng = np.random.default_rng(1)
    x = 1.0 + 0.01 * rng.standard_normal(40)
    x[15] += 1.0  # one step only: persistence 2 rejects it
    assert find_onset(x, OnsetRule()) is None
    assert find_onset(x, OnsetRule(persistence=1)).index == 15
    for slope in (0.001, 0.05, 1.0):  # a steady drift of any slope, with noise
        ramp = slope * np.arange(60) + 0.01 * rng.standard_normal(60)
        assert find_onset(ramp, OnsetRule()) is None, slope


def test_direction_min_delta_and_the_pending_end():
    x = np.r_[np.ones(10), np.full(3, 0.5)]
    assert find_onset(x, OnsetRule(direction="up")) is None
    assert find_onset(x, OnsetRule(direction="down")).index == 10
    assert find_onset(x, OnsetRule(min_delta=0.6)) is None  # σ = 0, but the change is below the floor
    assert find_onset(x, OnsetRule(min_rel=0.6)) is None
    last = find_onset(np.r_[np.ones(10), 2.0], OnsetRule())
    assert last.index == 10 and last.pending
    assert find_onset(np.r_[np.ones(4), 9.0], OnsetRule(persistence=1)) is None  # under min_baseline before
    shares = np.r_[np.full(10, 0.05), 0.10, 0.10]  # 2 then 4 of 40 rollouts: MAD 0, within binomial noise
    assert find_onset(shares, OnsetRule(min_delta=0.05)).index == 10
    assert find_onset(shares, OnsetRule(min_delta=0.05), counts=np.full(12, 40)) is None
    assert find_onset(np.r_[shares[:10], 0.4, 0.4], OnsetRule(), counts=np.full(12, 40)).index == 10
    with pytest.raises(ValueError, match="window"):
        OnsetRule(window=3)


# ---- detectors on planted runs -----------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_a_healthy_run_raises_nothing(report, seed):
    report = report(f"healthy{seed}")
    assert report.alerts == [], [a.message for a in report.alerts]
    assert report.exit_code() == 0
    watched = set(report.series.columns)
    assert {
        "mean_entropy",
        "kl_growth",
        "length",
        "truncated_share",
        "zero_variance_share",
        "repetition",
        "garbled",
        "abs_logged_gap",
        "pos_share_filler",
        "channel_share_style",
    } <= watched
    assert report.series["mean_entropy"].iloc[-1] < report.series["mean_entropy"].iloc[0]  # it does drift


@pytest.mark.parametrize("plant", PLANTS)
def test_each_planted_pathology_is_found_at_its_onset(runs, report, plant):
    report = report(plant)
    mine = [a for a in report.alerts if a.detector == plant]
    assert mine, f"{plant}: no alert; alerts: {[a.message for a in report.alerts]}"
    assert all(a.step == ONSET for a in mine), [(a.statistic, a.step) for a in mine]
    assert all(a.severity in ("warn", "alert") for a in mine)
    assert report.exit_code() == 1
    assert all(len(a.rollouts) == 5 for a in mine)
    with runs.read() as store:
        steps = dict(
            store.con.execute(
                "SELECT rollout_id, step FROM rollouts WHERE run_id = ?", [store.run_id(plant)]
            ).fetchall()
        )
    assert {steps[r] for a in mine for r in a.rollouts} == {ONSET}
    others = [a for a in report.alerts if a.detector != plant and a.step < ONSET]
    assert others == [], [a.message for a in others]  # nothing fires before the plant


def test_the_alerts_name_what_departed_and_the_rollouts_show_it(runs, report):
    filler = [a for a in report("class_share").alerts if a.detector == "class_share"]
    assert {a.statistic for a in filler} >= {"pos_share_filler"}
    up = next(a for a in filler if a.statistic == "pos_share_filler")
    assert up.value > up.baseline + 0.05 and "rose" in up.message
    # a quoted name reads as a name, never "class 'filler''s share"
    assert "the share of the positive credit on class 'filler' rose" in up.message, up.message
    with runs.read() as store:
        rows = store.con.execute(
            "SELECT rollout_id, tokens FROM rollouts WHERE run_id = ? AND list_contains(?, rollout_id)",
            [store.run_id("class_share"), up.rollouts],
        ).fetchall()
    assert all(tokens[-len(FILLER) :] == FILLER for _, tokens in rows)  # the rewarded filler is in each
    assert up.explorer == {"where": [f"step={ONSET}"], "sort": "-pos_share_filler"}

    loops = next(a for a in report("repetition").alerts if a.detector == "repetition")
    with runs.read() as store:
        reps = store.con.execute(
            "SELECT repetition FROM rollout_summary WHERE run_id = ? AND list_contains(?, rollout_id)",
            [store.run_id("repetition"), loops.rollouts],
        ).fetchall()
    assert min(r[0] for r in reps) > 0.5

    empty = next(a for a in report("zero_variance").alerts if a.detector == "zero_variance")
    with runs.read() as store:
        groups = store.con.execute(
            "SELECT DISTINCT group_id FROM rollout_summary WHERE run_id = ? AND "
            "list_contains(?, rollout_id) AND zero_variance",
            [store.run_id("zero_variance"), empty.rollouts],
        ).fetchall()
    assert len(groups) == len(empty.rollouts) == 5  # one rollout of each of five flat groups

    takeover = [a for a in report("channel_takeover").alerts if a.detector == "channel_takeover"]
    assert [a.statistic for a in takeover] == ["channel_share_style"]
    assert "the share of |β·Ã| on channel 'style' rose" in takeover[0].message, takeover[0].message


def test_settings_change_the_thresholds_and_switch_detectors_off(runs):
    quick = {"channel_takeover": {"enabled": False}}  # the one detector that reads tokens
    strict = monitor_config.parse_settings({"detectors": {**quick, "truncation": {"min_delta": 0.9}}})
    report = monitor.run_monitors(runs, "truncation", settings=strict)
    assert not [a for a in report.alerts if a.detector == "truncation"]
    off = monitor_config.parse_settings({"detectors": {n: {"enabled": False} for n in monitor_config.NAMES}})
    report = monitor.run_monitors(runs, "truncation", settings=off)
    assert report.alerts == [] and list(report.series.columns) == ["step"]
    late = monitor_config.parse_settings(
        {"onset": {"min_baseline": STEPS, "window": 30}, "detectors": quick}
    )  # no step has enough history before it
    assert not monitor.run_monitors(runs, "truncation", settings=late).alerts


@pytest.mark.parametrize(
    "doc, match",
    [
        ({"onset": {"z_wrn": 3}}, "unknown key 'z_wrn'"),
        ({"detectors": {"entropy": {}}}, r"\[detectors.entropy\]: no such detector"),
        ({"detectors": {"garbled": {"direction": "sideways"}}}, "direction must be"),
        ({"onset": {"persistence": 0}}, r"\[onset\]: persistence"),
        ({"onset": {"top_rollouts": 0}}, "top_rollouts"),
        ({"alerts": {}}, "unknown key 'alerts'"),
    ],
)
def test_bad_settings_name_the_key(doc, match):
    with pytest.raises(InputError, match=match):
        monitor_config.parse_settings(doc, "m.toml")


def test_the_defaults_file_reads_back_as_the_defaults():
    parsed = monitor_config.parse_settings(tomllib.loads(monitor_config.defaults_toml()))
    for name in monitor_config.NAMES:
        assert parsed.rule(name) == monitor_config.MonitorSettings().rule(name)
    assert change_point.OnsetRule().z_warn == parsed.rule("garbled").z_warn


# ---- the command -------------------------------------------------------------------------------------


def test_command_exit_codes_json_and_config(runs, report, tmp_path):
    db = runs.path
    healthy = run_cli_here("monitor", "--db", db, "--run", "healthy0", "--json")
    assert healthy.returncode == 0, healthy.stderr
    assert json.loads(healthy.stdout) == []
    sick = run_cli_here("monitor", "--db", db, "--run", "truncation", "--json")
    assert sick.returncode == 1, sick.stderr
    alerts = json.loads(sick.stdout)
    assert {"detector", "step", "severity", "value", "baseline", "message", "rollouts"} <= set(alerts[0])
    found = [a for a in alerts if a["detector"] == "truncation"]
    assert found and found[0]["step"] == ONSET
    assert all(math.isfinite(found[0][k]) for k in ("value", "baseline"))
    same = [a.as_dict() for a in report("truncation").alerts]
    assert alerts == json.loads(json.dumps(same))  # the command prints the function's alerts
    text = run_cli_here("monitor", "--db", db, "--run", "truncation")
    assert text.returncode == 1
    assert "truncation (truncated_share)" in text.stdout and "rollouts:" in text.stdout
    config = tmp_path / "m.toml"
    config.write_text("[detectors.truncation]\nenabled = false\n")
    quiet = run_cli_here("monitor", "--db", db, "--run", "truncation", "--config", config, "--json")
    assert quiet.returncode == 0 and json.loads(quiet.stdout) == []
    config.write_text("[detectors.truncation]\nmin_delta = 'x'\n")
    bad = run_cli_here("monitor", "--db", db, "--run", "truncation", "--config", config)
    assert bad.returncode == 2 and "m.toml" in bad.stderr and bad.stdout == ""
    for args in (
        ("--run", "nope"),
        ("--run", "truncation", "--channel", "nope"),
        ("--run", "truncation", "--estimator", "nope"),
        ("--run", "truncation", "--config", tmp_path / "missing.toml"),
    ):
        assert run_cli_here("monitor", "--db", db, *args).returncode == 2, args
    defaults = run_cli_here("monitor", "--defaults")
    assert defaults.returncode == 0 and "[detectors.logged_gap]" in defaults.stdout


def test_every_detector_and_setting_is_documented():
    """docs/monitors.md has a section per detector and names every setting (a new one fails here)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "monitors.md").read_text()
    for d in monitor_config.DETECTORS:
        assert f"### `{d.name}`" in text, d.name
        assert (
            f"[{'both directions' if d.direction == 'both' else d.direction}"
            in text.split(f"### `{d.name}`")[1].split("###")[0]
            or d.direction in text
        ), d.name
    for key in tomllib.loads(monitor_config.defaults_toml())["onset"]:
        assert key in text, key


def test_channel_takeover_reads_the_first_groups_of_each_step_when_asked(runs):
    task = (("channel", "task"),)
    every, rows = monitor.channel_step_shares(runs, "channel_takeover", "grpo", task, "task")
    some, few = monitor.channel_step_shares(runs, "channel_takeover", "grpo", task, "task", groups_per_step=2)
    assert all(len(r) == PROMPTS * GROUP for r in rows.values())
    assert all(len(r) == 2 * GROUP for r in few.values())
    assert all(set(few[s].index) < set(rows[s].index) for s in rows)
    assert list(every["step"]) == list(some["step"]) == list(range(STEPS))
    assert every["style"].iloc[-1] > 2 * every["style"].iloc[0]  # the planted takeover, either way
    assert some["style"].iloc[-1] > 2 * some["style"].iloc[0]
    with pytest.raises(InputError, match="groups_per_step"):
        monitor_config.parse_settings({"detectors": {"channel_takeover": {"groups_per_step": -1}}})
    with pytest.raises(InputError, match="unknown key 'groups_per_step'"):
        monitor_config.parse_settings({"detectors": {"garbled": {"groups_per_step": 2}}})
    settings = monitor_config.parse_settings({"detectors": {"channel_takeover": {"groups_per_step": 3}}})
    assert settings.option("channel_takeover", "groups_per_step") == 3


def test_live_monitoring_prints_each_alert_once_as_the_run_grows(tmp_path, capsys):
    """`import --follow --monitor`: after each new step the monitors rerun and print only what is new —
    nothing before the onset, the onset as `info` while it cannot be confirmed, then its confirmation."""
    records = monitor_records("truncation", seed=2)
    db = tmp_path / "live.duckdb"
    config = tmp_path / "m.toml"
    config.write_text("[detectors.channel_takeover]\nenabled = false\n")
    args = argparse.Namespace(db=db, monitor_config=config)

    def grow(steps: range) -> None:
        with Store(db) as store:
            import_records(
                store,
                "live",
                [r for r in records if r["step"] in steps],
                content_key=f"live{steps.start}",
                append=steps.start > 0,
            )

    grow(range(0, ONSET))
    watch = cli_monitor.live_monitor(args)
    watch("live")
    assert capsys.readouterr().out == ""
    grow(range(ONSET, ONSET + 1))
    watch("live")
    first = capsys.readouterr().out
    assert f"INFO  step {ONSET:<5} truncation" in first and "not yet persistent" in first
    grow(range(ONSET + 1, ONSET + 2))
    watch("live")
    second = capsys.readouterr().out
    assert f"step {ONSET:<5} truncation" in second and ("ALERT" in second or "WARN" in second)
    assert "not yet persistent" not in second
    grow(range(ONSET + 2, ONSET + 3))
    watch("live")
    assert "truncation" not in capsys.readouterr().out  # already said


def test_follow_with_bad_monitor_settings_stops_before_importing(tmp_path):
    config = tmp_path / "m.toml"
    config.write_text("[onset]\nz_warn = -1\n")
    (tmp_path / "dir").mkdir()
    done = run_cli_here(
        "import",
        tmp_path / "dir",
        "--db",
        tmp_path / "s.duckdb",
        "--run",
        "r",
        "--follow",
        "--monitor-config",
        config,
    )
    assert done.returncode == 2 and "m.toml [onset]" in done.stderr and "z_warn" in done.stderr


def test_the_watched_series_are_the_trends_numbers(runs, report):
    """One truth: what the detectors watch is what Trends charts (and `creditlens trends` prints)."""
    series = report("healthy0").series
    trends = explorer.step_trends(runs, "healthy0", "grpo", (("channel", "task"),), quantiles=False)
    for column in ("mean_entropy", "length", "truncated_share", "zero_variance_share", "repetition"):
        np.testing.assert_allclose(series[column].to_numpy(float), trends[column].to_numpy(float))
    np.testing.assert_allclose(series["kl_growth"].to_numpy(float)[1:], np.diff(trends["kl"].to_numpy(float)))
    with runs.read() as store:
        positive = store.con.execute(
            "SELECT s.step, sum(c.class_pos[2]) / sum(list_sum(c.class_pos)) FROM credit_summary c JOIN "
            "rollout_summary s USING (run_id, rollout_id) WHERE c.run_id = ? AND c.estimator = 'grpo' "
            "AND c.channel = 'task' "
            "GROUP BY s.step ORDER BY s.step",
            [store.run_id("healthy0")],
        ).fetchall()
    np.testing.assert_allclose(series["pos_share_filler"].to_numpy(float), [p for _, p in positive])


def test_a_run_too_short_for_a_baseline_says_so(tmp_path):
    with Store(tmp_path / "s.duckdb") as store:
        import_records(
            store, "short", [r for r in monitor_records("truncation") if r["step"] < 5], content_key="short"
        )
    settings = monitor_config.parse_settings({"detectors": {"channel_takeover": {"enabled": False}}})
    found = monitor.run_monitors(StoreHandle(tmp_path / "s.duckdb"), "short", settings=settings)
    assert found.alerts == [] and any("5 steps" in n and "min_baseline" in n for n in found.notes)


def _two_reward_records(seed: int = 0) -> list[dict]:
    """A TRL-like run with two reward functions and no `task` channel: `correct` and `neat`, each varying
    inside every group until ONSET, when `correct` stops varying (every group all right or all wrong) and
    `neat` carries all the credit."""
    rng = random.Random(seed)
    records = []
    for step in range(STEPS):
        for g in range(PROMPTS):
            settled = float(rng.random() < 0.5)
            for _ in range(GROUP):
                ids = [rng.randint(0, 50) for _ in range(rng.randint(4, 12))]
                correct = settled if step >= ONSET else float(rng.random() < 0.5)
                records.append(
                    {
                        "prompt": f"step {step} prompt {g}",
                        "response": " ".join(map(str, ids)),
                        "step": step,
                        "token_ids": ids,
                        "rewards": {"correct": correct, "neat": float(rng.random() < 0.5)},
                    }
                )
    return records


def test_channel_takeover_reads_the_split_channels_when_the_main_one_is_all(tmp_path):
    """Before: on a two-reward run whose main channel is `all` (the scores summed: one channel), the
    detector was skipped with "one channel carries all the credit" and the takeover went unseen."""
    db = tmp_path / "runs.duckdb"
    with Store(db) as store:
        import_records(store, "two", _two_reward_records(), content_key="two")
        assert store.main_channel("two") == "all"
    only = {n: {"enabled": n == "channel_takeover"} for n in monitor_config.NAMES}
    settings = monitor_config.parse_settings({"detectors": only})
    handle = StoreHandle(db)
    found = monitor.run_monitors(handle, "two", "grpo", settings=settings)
    assert found.channel == "all"
    assert not any("nothing to take over" in note for note in found.notes), found.notes
    assert {"channel_share_correct", "channel_share_neat"} <= set(found.series.columns)
    shares = found.series.set_index("step")
    assert shares.loc[: ONSET - 1, "channel_share_neat"].max() < 0.7
    assert shares.loc[ONSET:, "channel_share_neat"].min() == pytest.approx(1.0)
    takeover = [a for a in found.alerts if a.detector == "channel_takeover"]
    assert takeover and {a.step for a in takeover} == {ONSET}
    assert {a.statistic for a in takeover} <= {"channel_share_neat", "channel_share_correct"}
    again = monitor.run_monitors(handle, "two", "grpo", settings=settings)  # from the stored summary
    assert [a.as_dict() for a in again.alerts] == [a.as_dict() for a in found.alerts]
    # on one of the channels, the split is the same
    on_correct = monitor.run_monitors(handle, "two", "grpo", (("channel", "correct"),), settings=settings)
    assert on_correct.series["channel_share_neat"].tolist() == pytest.approx(
        shares["channel_share_neat"].tolist()
    )
