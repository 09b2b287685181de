"""`creditlens teacher` (Monte Carlo teacher values of a run), `creditlens teacher-bench` (every
estimator ranked against them) and `creditlens cliff` (the cliff tokens the values show)."""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path

import pyarrow.parquet as pq
from tqdm import tqdm

from backend.cli.common import add_db_arg, add_model_args
from backend.core.errors import InputError
from backend.evaluation import cliff_tokens
from backend.store import store_handle


def add_commands(sub) -> None:
    p = sub.add_parser(
        "teacher",
        help="Monte Carlo teacher values V(s_t) at positions of many rollouts "
        "(resumable: a rerun continues where it stopped)",
    )
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name (see `creditlens runs`)")
    p.add_argument("--rollouts", default="all", help="N (spread evenly over the run) or all (default all)")
    p.add_argument(
        "--positions",
        default="steps",
        help="steps, turns (the start of every assistant turn of an agent run), entropy:K or every:K, or "
        "several joined by commas (position 0 always; default steps)",
    )
    p.add_argument("--samples", type=int, default=16, help="suffixes per position, M (default 16)")
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the rollout choice and the sampling (default 0)"
    )
    add_model_args(p)
    p.add_argument("--verifier", default=None, help="verifier name or module:function (default: the run's)")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="longest suffix in tokens (default: twice the run's longest response plus 16)",
    )
    p.add_argument(
        "--environment",
        default=None,
        help="an agent run's tool loop for the suffixes: calculator, or module:attribute (an Environment or "
        "a list of tool functions); default: the run's (`creditlens environment`)",
    )
    p.add_argument(
        "--ray",
        default=None,
        metavar="auto|ADDRESS|local:N",
        help="run on a Ray cluster: auto (the running cluster), an address such as "
        "ray://head:10001, or local:N (start one here with N CPUs)",
    )
    p.add_argument("--workers", type=int, default=None, help="Ray workers (default: one per CPU or GPU)")
    p.add_argument(
        "--export",
        type=Path,
        default=None,
        help="afterwards, write every teacher suffix of the run to this Parquet file",
    )
    p.add_argument("--json", action="store_true", help="print the job's report as JSON")
    p.set_defaults(func=cmd_teacher)

    p = sub.add_parser("teacher-bench", help="rank every estimator against the run's Monte Carlo teacher")
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name (see `creditlens runs`)")
    p.add_argument(
        "--estimators",
        nargs="*",
        default=None,
        help="names, or name:key=value,key=value for a setting (default: every registered one)",
    )
    p.add_argument(
        "--channel",
        default=None,
        help="the channel the estimators read and the last segment ends on (default: the run's "
        "main channel); 'all': the channel scores summed per rollout",
    )
    p.add_argument(
        "--steps",
        type=int,
        nargs="+",
        default=None,
        metavar="STEP",
        help="judge only the valued rollouts of these training steps (say, those whose teacher "
        "is on-policy in the calibration table); the estimates are the same",
    )
    p.add_argument("--json", type=Path, default=None, help="write the table and its definitions here")
    p.set_defaults(func=cmd_teacher_bench)

    p = sub.add_parser(
        "cliff",
        help="cliff tokens: where a rollout's Monte Carlo success rate drops by the "
        "official one-sided z-test (Cliff Tokens, arXiv 2606.25524)",
    )
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name (see `creditlens runs`)")
    p.add_argument("--rollout", type=int, default=None, help="one rollout (default: every valued one)")
    p.add_argument("--delta0", type=float, default=cliff_tokens.DELTA_0, help="minimum drop (default 0.1)")
    p.add_argument(
        "--z", type=float, default=cliff_tokens.Z_ALPHA, help="one-sided z quantile (default 1.645)"
    )
    p.add_argument("--all-pairs", action="store_true", help="every valued pair, not only the cliffs")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=cmd_cliff)


def parse_rollouts(text: str) -> int | None:
    if text == "all":
        return None
    try:
        return int(text)
    except ValueError:
        raise InputError(f"--rollouts {text!r}: expected a number or 'all'") from None


def cmd_teacher(args) -> int:
    from backend.models.teacher import (  # noqa: PLC0415 - heavy (torch); see backend/cli/__init__.py
        JOB,
        TeacherSettings,
        run_teacher,
    )

    handle = store_handle(args.db)
    with handle.read() as store:
        info = store.run_info(args.run)
    settings = TeacherSettings(
        model_dir=args.model,  # None: each rollout's step checkpoint (backend.store.checkpoints)
        samples=args.samples,
        verifier=args.verifier or info.get("verifier") or "answer_match",
        engine=args.engine,
        device=args.device,
        allow_pickle=args.allow_pickle,
        max_new_tokens=args.max_new_tokens,
        environment=args.environment,
    )
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())  # Ctrl-C: keep what is finished
    bar = tqdm(desc="teacher", unit="rollout", file=sys.stderr, disable=args.json and not sys.stderr.isatty())

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        report = run_teacher(
            handle,
            args.run,
            settings,
            rollouts=parse_rollouts(args.rollouts),
            positions=args.positions,
            seed=args.seed,
            ray_address=args.ray,
            workers=args.workers,
            progress=progress,
            cancel=stop,
        )
    finally:
        bar.close()
        signal.signal(signal.SIGINT, previous)
    if args.export is not None:
        with handle.read() as store:
            table = store.job_samples(args.run, JOB)
        pq.write_table(table, args.export, compression="zstd", compression_level=19)
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        state = "cancelled; rerun to continue" if report.cancelled else "done"
        print(
            f"teacher for {args.run!r} ({state}): {report.valued} rollouts valued now, {report.already} "
            f"earlier, of {report.chosen}; {report.positions} positions, {report.suffixes} suffixes, "
            f"{report.tokens} tokens in {report.seconds:.1f}s ({report.engine}, "
            f"{report.workers} worker(s))"
        )
        if report.environment:
            print(f"  suffixes through the run's tool loop: environment {report.environment!r}")
        for step, used in report.models.items():
            print(f"  step {step}: {used['why']}")
    return 130 if report.cancelled and stop.is_set() else 0


def cmd_teacher_bench(args) -> int:
    from backend.evaluation.teacher_bench import (  # noqa: PLC0415 - heavy (torch, estimators); see backend/cli
        DEFINITIONS,
        METRICS,
        parse_estimator_specs,
        teacher_bench,
    )

    handle = store_handle(args.db)
    specs = parse_estimator_specs(args.estimators)
    result = teacher_bench(handle, args.run, specs, args.channel, args.steps)
    table = result.table
    if args.json is not None:
        args.json.write_text(json.dumps({**result.to_json(), "steps": args.steps}, indent=1, default=float))
    at = "" if args.steps is None else f" at steps {', '.join(map(str, args.steps))}"
    print(
        f"run {args.run!r}{at}: {result.n_positions} valued positions in {result.n_rollouts} rollouts "
        f"({result.n_segments} segments; {result.n_first_wrong} failed with a wrong step; "
        f"{result.n_cliffs} with a cliff token); mean ± stderr over rollouts / stderr by a bootstrap over "
        "groups (rollouts of a group share a baseline)"
    )
    note = result.off_policy_note()
    if note:
        print(note)
    shown = [m for m in METRICS if table[m].notna().any()]
    width = {m: max(24, len(m) + 2) for m in shown}
    print(f"{'estimator':<30}{'kind':<14}" + "".join(f"{m:>{width[m]}}" for m in shown))
    for _, row in table.iterrows():
        cells = "".join(f"{_cell(row[m], row[f'{m}_se'], row[f'{m}_se_group']):>{width[m]}}" for m in shown)
        print(f"{row['estimator'][:29]:<30}{row['kind']:<14}{cells}")
    for line in result.skipped:
        print(f"skipped {line}")
    _print_calibration(result.calibration)
    for m in shown:
        print(f"{m}: {DEFINITIONS[m]}")
    return 0


def _print_calibration(table) -> None:
    """Per step: mean V̂(∅) vs the observed accuracy of the same rollouts (a teacher that is the sampling
    policy agrees within the stderrs)."""
    if table.empty:
        return
    print("calibration: mean V̂(∅) (teacher) vs observed accuracy, per step (same rollouts; mean ± stderr)")
    print(f"{'step':>6}{'V̂(∅)':>18}{'accuracy':>18}{'n':>6}{'step acc (all)':>16}{'on-policy':>11}")
    for r in table.itertuples():
        policy = "unknown" if r.on_policy is None or r.on_policy != r.on_policy else f"{r.on_policy:.0%}"
        print(
            f"{r.step:>6}{_cell(r.v_empty, r.v_empty_se):>18}{_cell(r.accuracy, r.accuracy_se):>18}{r.n:>6}"
            f"{f'{r.step_accuracy:.3f} ({r.step_n})':>16}{policy:>11}"
        )


def _cell(value: float, se: float, se_group: float = float("nan")) -> str:
    if value != value:
        return "-"
    text = f"{value:.3f} ± {se:.3f}" if se == se else f"{value:.3f}"
    return f"{text} / {se_group:.3f}" if se_group == se_group else text


def cmd_cliff(args) -> int:
    table = cliff_tokens.stored_cliffs(store_handle(args.db), args.run, args.rollout, args.delta0, args.z)
    if table.empty:
        where = f"run {args.run!r}" + (f" rollout {args.rollout}" if args.rollout is not None else "")
        raise InputError(
            f"{where}: no rollout with two valued positions; value it with `creditlens teacher` "
            "or `creditlens resample` first"
        )
    shown = table if args.all_pairs else table[table["cliff"]]
    if args.json:
        print(
            json.dumps(
                {
                    "run": args.run,
                    "delta_0": args.delta0,
                    "z_alpha": args.z,
                    "pairs": int(len(table)),
                    "rollouts": int(table["rollout_id"].nunique()),
                    "rows": json.loads(shown.to_json(orient="records")),
                },
                indent=1,
            )
        )
        return 0
    print(
        f"run {args.run!r}: {len(table)} valued pairs in {table['rollout_id'].nunique()} rollouts, "
        f"{int(table['cliff'].sum())} cliffs in {int(table['first'].sum())} rollouts "
        f"(drop > {args.delta0:g} + {args.z:g} se)"
    )
    print(
        f"{'rollout':>8}{'token':>7}{'segment':>12}{'p_prev':>8}{'p':>8}{'drop':>8}{'threshold':>10}  first"
    )
    for r in shown.itertuples():
        text = f"  {getattr(r, 'token_text', '')!r}" if "token_text" in shown.columns else ""
        print(
            f"{r.rollout_id:>8}{r.token:>7}{f'[{r.start}, {r.pos})':>12}{r.p_prev:>8.3f}{r.p:>8.3f}"
            f"{r.drop:>8.3f}{r.threshold:>10.3f}  {'yes' if r.first else ''}{text}"
        )
    return 0
