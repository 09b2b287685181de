"""Every read-only command of the command line on every run, with options drawn by hypothesis.

The commands come from the parser (`build_parser`), so a new command is in the matrix, or in `SKIPPED` with
its reason, or this module fails. The runs are what `creditlens init` imports (the bundled runs) and the
fixture logs the importer tests write (a verl v1 dump and a two-reward TRL completions log, imported with
the demo tokenizer). Each drawn case asserts the command-line contract: exit 0, or exit 2 with exactly one
line on stderr; never a traceback; and the store as it was: byte for byte, or with only the caches of
what the command computed filled (`CACHES`), which the same command run again reads, byte for byte.

Options are drawn where users trip: channels in any order and repeated, `all` and a channel the run lacks,
boundary and huge offsets and limits, `--tau`/`--beta`/`--violation` in any order with negative and
out-of-range values. Hypothesis runs under the suite's profile (`ci`: derandomized, no database,
`print_blob=True`), so a failure prints a `@reproduce_failure` blob that replays it; under
HYPOTHESIS_PROFILE=dev the examples are fresh each run and failures are kept in .hypothesis/.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.cli import build_parser
from backend.cli.reference import _subcommands
from backend.store import Store
from tests.backend.ingest.verl_dumps import v1_step
from tests.conftest import run_cli_here, snapshot

DEMO_POLICY = Path(__file__).resolve().parents[2] / "sample_runs" / "demo-policy"

# Commands the matrix does not run, each with why.
SKIPPED = {
    "init": "writes the store by design (creates it and imports the bundled runs)",
    "import": "writes the store by design (the fixture runs below go through it)",
    "delete": "writes the store by design",
    "environment": "writes the run's meta with --set/--clear (tests/backend/models/test_resample_tools.py)",
    "score": "needs the policy model: fills logprobs and entropies (a model job, written to the store)",
    "resample": "needs the policy model and samples suffixes (long work, written to the store)",
    "model-credit": "needs the policy model (long work, written to the store)",
    "teacher": "needs the policy model: Monte Carlo teacher values (long work)",
    "attribution": "needs the policy model: per-token gradients (tests/backend/test_attribution_command.py)",
    "teacher-bench": "long work: ranks every estimator against the teacher (about two minutes on 2 cores)",
    "verify-steps": "needs a step verifier model and writes the process channel",
    "synth": "writes a synthetic run (long work)",
    "oracle-bench": "long work: seeds × prompts synthetic runs",
    "app": "starts a server",
    "watch": "follows a folder and starts a server",
}

# Commands whose per-run cost on the bundled store is seconds, not a fraction of one: one drawn case per
# run instead of two, so the module stays within a minute.
HEAVY = {"tune", "turns", "monitor", "compare-runs", "logged-gap", "compare", "landed"}
# Drawn cases per cell (command × run); the long loops raise it (CREDITLENS_MATRIX_EXAMPLES=20 with
# HYPOTHESIS_PROFILE=dev draws fresh cases and keeps the failing ones in .hypothesis/).
EXAMPLES = int(os.environ.get("CREDITLENS_MATRIX_EXAMPLES", "2"))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _trl_log(folder: Path) -> Path:
    """TRL's `completions/completions_{step:05d}.parquet` (GRPOTrainer.log with log_completions=True): step,
    prompt, completion, one float64 column per reward function (NaN where it returned None), advantage;
    two reward functions, groups of four consecutive rows."""
    folder.mkdir(parents=True, exist_ok=True)
    for step in (1, 2):
        rows = []
        for g, prompt in enumerate(["1+2=?\n", "3+4=?\n"]):
            for k in range(4):
                rows.append(
                    {
                        "step": step,
                        "prompt": prompt,
                        "completion": f"{g + k}+{k}={g + 2 * k}\n#### {g + 2 * k}",
                        "format_reward": float(k % 2) if k != 3 else float("nan"),
                        "accuracy_reward": float(k == g),
                        "advantage": 0.5 - 0.25 * k,
                    }
                )
        pd.DataFrame(rows).to_parquet(folder / f"completions_{step:05d}.parquet")
    return folder


@pytest.fixture(scope="module")
def matrix_store(bundled_template, tmp_path_factory) -> tuple[Path, dict]:
    """A copy of the bundled store (made once) with the fixture runs imported, and each run's facts (channels,
    rollouts, groups) for the strategies."""
    folder = tmp_path_factory.mktemp("matrix")
    db = folder / "runs.duckdb"
    shutil.copy(bundled_template, db)
    verl = folder / "verl"
    for step in (1, 2):
        v1_step(verl, step, acc=True)
    for run, path in (("verl", verl), ("trl", _trl_log(folder / "trl" / "completions"))):
        done = run_cli_here("import", path, "--db", db, "--run", run, "--model", DEMO_POLICY, "--quiet")
        assert done.returncode == 0, done.stderr
    runs = {r["name"]: r for r in json.loads(run_cli_here("runs", "--db", db, "--json").stdout)}
    return db, runs


RUNS = ("demo", "agent", "oracle", "kl-0.0", "kl-0.2", "agent-trl", "verl", "trl")


def test_the_matrix_covers_every_command_of_the_parser():
    """A command added to the parser lands in the matrix (or in SKIPPED with its reason)."""
    commands = set(_subcommands(build_parser()))
    assert set(OPTIONS) | set(SKIPPED) == commands, sorted(commands ^ (set(OPTIONS) | set(SKIPPED)))
    assert not set(OPTIONS) & set(SKIPPED)


def test_the_matrix_runs_are_every_bundled_run_and_the_fixtures(matrix_store):
    _, runs = matrix_store
    assert set(runs) == set(RUNS), sorted(runs)


# ---- strategies: each command's options, drawn from the run's facts -----------------------------------


def _channel(info: dict):
    """A channel of the run, `all`, or one it lacks."""
    return st.sampled_from([*info["channels"], "all", "nope"])


def _pairs(option: str, info: dict, values):
    """`--option C=V` repeated, channels in any order (repeats included)."""
    pair = st.tuples(st.sampled_from([*info["channels"], "kl", "nope"]), values)
    return st.lists(pair, max_size=3).map(lambda ps: [w for c, v in ps for w in (option, f"{c}={v}")])


def _maybe(option: str, values):
    return st.one_of(st.just([]), values.map(lambda v: [option, str(v)]))


ROWS = st.one_of(st.integers(-1, 500), st.sampled_from([10**9, 10**20]))
WHERE = st.tuples(
    st.sampled_from(["length", "step", "reward", "score_task", "zero_variance", "nope", "group_id"]),
    st.sampled_from(["<", "<=", ">", ">=", "=", "!="]),
    st.sampled_from(["0", "1", "-0.5", "1e300", "true", "x", "nan"]),
).map(lambda t: "".join(t))


def _rollouts(info):
    return st.tuples(
        st.sampled_from([["--json"], ["--out", "OUT.parquet"]]),
        _maybe("--sort", st.sampled_from(["rollout_id", "-length", "reward", "step", "nope"])),
        _maybe("--search", st.sampled_from(["", "zzzz", "+", "#### 4", "carry"])),
        st.lists(WHERE, max_size=3).map(lambda ws: [w for x in ws for w in ("--where", x)]),
        _maybe("--limit", ROWS),
        _maybe("--offset", ROWS),
        _maybe("--channel", _channel(info)),
        _pairs("--beta", info, st.sampled_from([0, 2, -1])),
    )


def _rollout_id(info):
    return st.sampled_from([0, info["rollouts"] - 1, info["rollouts"], -1, 99999])


def _group_id(info):
    return st.sampled_from([0, info["groups"] - 1, info["groups"], -1, 99999])


def _tune(info):
    return st.tuples(
        _maybe("--channel", _channel(info)),
        _pairs("--tau", info, st.sampled_from([0, 0.2, 1, 1.5, -0.1])),
        _pairs("--beta", info, st.sampled_from([0, 2, -1, 1e9])),
        _pairs("--violation", info, st.sampled_from([0, 0.5, -1])),
        _maybe("--eta", st.sampled_from([0, 0.5, -1, 100])),
        _maybe("--mode", st.sampled_from(["projected", "lexicographic"])),
        st.just(["--no-effect"]),
        st.sampled_from([[], ["--json"]]),
    )


OPTIONS = {
    "runs": lambda info: st.sampled_from([[], ["--json"]]).map(lambda a: ["NORUN", *a]),
    "estimators": lambda info: st.sampled_from([[], ["--json"]]).map(lambda a: ["NODB", *a]),
    "main-channel": lambda info: st.just([]),
    "token-classes": lambda info: st.just([]),
    "checkpoints": lambda info: st.just([]),
    "rollouts": _rollouts,
    "histogram": lambda info: st.tuples(
        _maybe("--bins", st.integers(-1, 40)), st.sampled_from([[], ["--json"]])
    ),
    "group": lambda info: st.tuples(
        _group_id(info).map(lambda g: ["--group", str(g)]), st.sampled_from([[], ["--json"]])
    ),
    "trends": lambda info: st.tuples(
        st.just(["--json"]),
        _maybe("--smooth", st.sampled_from([0, 0.5, 0.99, 1, -0.1])),
        _maybe("--channel", _channel(info)),
    ),
    "explain": lambda info: st.tuples(
        _rollout_id(info).map(lambda r: ["--rollout", str(r)]),
        # none: the run's own credit (as trained on a trainer's run)
        st.sampled_from(
            [[], *(["--estimator", e] for e in ("grpo", "rloo", "as_trained", "logged", "nope"))]
        ),
        _maybe("--channel", _channel(info)),
        st.sampled_from([[], ["--json"]]),
    ),
    "estimate": lambda info: st.tuples(
        st.sampled_from([[], ["--estimator", "grpo"], ["--estimator", "as_trained"]]),
        st.just(["--out", "OUT.parquet"]),
        _maybe("--channel", _channel(info)),
    ),
    "compare": lambda info: st.tuples(
        _rollout_id(info).map(lambda r: ["--rollout", str(r)]),
        st.lists(st.sampled_from(["grpo", "as_trained", "entropy", "nope"]), min_size=1, max_size=3).map(
            lambda names: [w for n in names for w in ("--estimator", n)]
        ),
        st.sampled_from([[], ["--credit", "final"], ["--credit", "channel:task"], ["--credit", "summed"]]),
        st.sampled_from([[], ["--json"]]),
    ),
    "logged-gap": lambda info: st.sampled_from([[], ["--json"]]),
    "cliff": lambda info: st.just([]),
    # The whole-run table of the agent run (the one run with turns) computes every group's credit: seconds
    # on 2 cores, so the matrix draws its groups; tests/backend/test_agent_turns.py checks the whole table.
    "turns": lambda info: st.one_of(
        st.just([]) if info["name"] != "agent" else st.nothing(),
        _group_id(info).map(lambda g: ["--group", str(g)]),
    ),
    "monitor": lambda info: st.sampled_from([["--json"], []]),
    # the default source: the recorded Δ (kl-0.*), else the after-update checkpoints the other runs lack
    "landed": lambda info: st.tuples(
        st.sampled_from([[], ["--source", "recorded"], ["--steps", "1,3"], ["--steps", "x"]]),
        st.sampled_from([[], ["--compare", "grpo"], ["--compare", "grpo,nope"], ["--rollouts"]]),
        st.sampled_from([[], ["--json"]]),
    ),
    "tune": _tune,
    "compare-runs": lambda info: st.sampled_from(RUNS).map(lambda other: ["--run", other, "--json"]),
}


def _flat(options) -> list[str]:
    if isinstance(options, tuple):
        return [w for part in options for w in _flat(part)]
    return list(options)


def _argv(command: str, run: str, options: list[str], db: Path, out: Path) -> list[str]:
    words = [str(out) if w == "OUT.parquet" else w for w in options]
    if words[:1] == ["NODB"]:
        return [command, *words[1:]]
    if words[:1] == ["NORUN"]:
        return [command, "--db", str(db), *words[1:]]
    return [command, "--db", str(db), "--run", run, *words]


def _check(done, argv: list[str]) -> None:
    case = "creditlens " + " ".join(argv)
    assert "Traceback" not in done.stderr, f"{case}\n{done.stderr}"
    if done.returncode in (0, 1) and argv[0] == "monitor":
        return  # monitor: exit 1 on a warning, by its contract
    assert done.returncode in (0, 2), f"{case}: exit {done.returncode}\n{done.stderr}"
    if done.returncode == 2:
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, f"{case}: {len(lines)} lines on stderr\n{done.stderr}"


# What a read-only command may add to the store: the caches of what it computed (an estimator's credit and
# its summaries, the per-rollout summary), kept so that the next call reads them (DESIGN.md: every view and
# command goes through the same cache as `creditlens estimate`). Every other table keeps its rows, and the
# same command again leaves the file byte for byte as it was.
CACHES = {"estimates", "credit_summary", "credit_agreement", "channel_summary", "rollout_summary"}
_COUNTS: dict[str, dict[str, int]] = {}  # store hash -> rows per table (computed only when the hash is new)


def _counts(db: Path, sha: str) -> dict[str, int]:
    if sha not in _COUNTS:
        with Store(db, read_only=True) as store:
            _COUNTS[sha] = snapshot(store)
    return _COUNTS[sha]


def _leaves_the_store(db: Path, argv: list[str]) -> None:
    """Run `argv` on `db` and check the contract and what it left in the store."""
    case = "creditlens " + " ".join(argv)
    before = _sha(db)
    counts = _counts(db, before)
    done = run_cli_here(*argv)
    _check(done, argv)
    after = _sha(db)
    if after == before:
        return
    changed = {t for t, n in _counts(db, after).items() if counts.get(t) != n}
    assert changed <= CACHES, f"{case} changed the store beyond its caches: {sorted(changed - CACHES)}"
    again = run_cli_here(*argv)
    assert _sha(db) == after, f"{case} run again changed the store (it should read the cache it filled)"
    assert again.returncode == done.returncode, f"{case}: exit {done.returncode}, then {again.returncode}"


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_every_command_on_every_run(command, run, matrix_store, tmp_path):
    db, runs = matrix_store
    if command in ("runs", "estimators") and run != RUNS[0]:
        pytest.skip(f"{command} reads no run: one column of the matrix is enough")

    @settings(max_examples=max(1, EXAMPLES // 2) if command in HEAVY else EXAMPLES)
    @given(OPTIONS[command](runs[run]))
    def case(options):
        _leaves_the_store(db, _argv(command, run, _flat(options), db, tmp_path / "out.parquet"))

    case()
