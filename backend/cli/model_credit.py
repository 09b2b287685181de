"""`creditlens model-credit`: OAR-P, OAR-G or GCPO scores of a run's rollouts from the policy model,
cached in the store for the estimators of the same names."""

from __future__ import annotations

import json
import signal
import sys
import threading

from tqdm import tqdm

from backend.cli.common import add_db_arg, add_model_args
from backend.cli.teacher import parse_rollouts
from backend.core.batch_fields import MODEL_SCORED
from backend.store import store_handle


def add_commands(sub) -> None:
    p = sub.add_parser(
        "model-credit",
        help="per-token scores of the model-based estimators (OAR-P, OAR-G, "
        "GCPO), computed with the policy and cached",
    )
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name (see `creditlens runs`)")
    p.add_argument("--method", required=True, choices=MODEL_SCORED, help="the model-scored estimator to fill")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--rollout", type=int, default=None, help="this rollout's group")
    where.add_argument(
        "--rollouts",
        default="all",
        help="the first N rollouts by id, completed to whole groups, or all (default)",
    )
    add_model_args(p)
    # The two defaults live with the model code (torch): None here stands for them (backend/cli/__init__.py).
    p.add_argument(
        "--answer-regex",
        default=None,
        help="OAR: the final answer is group 1 of the last match in the response "
        "(tokens before the match are the reasoning that gets scored)",
    )
    p.add_argument(
        "--negative-prompt",
        default=None,
        help="GCPO: the negative prompt, with {prompt} standing for the rollout's prompt",
    )
    p.add_argument(
        "--noise-std",
        type=float,
        default=1e-3,
        help="OAR-G: noise on the reasoning embeddings (default 0.001)",
    )
    p.add_argument("--seed", type=int, default=0, help="OAR-G: noise seed, rollout id added (default 0)")
    p.add_argument("--chunk-size", type=int, default=64, help="sequences per forward pass (default 64)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_model_credit)


def cmd_model_credit(args) -> int:
    from backend.models.model_credit import (  # noqa: PLC0415 - heavy (torch); see backend/cli/__init__.py
        ANSWER_REGEX,
        NEGATIVE_TEMPLATE,
    )
    from backend.models.model_credit_run import (  # noqa: PLC0415 - idem
        ModelCreditSettings,
        run_model_credit,
    )

    handle = store_handle(args.db)
    settings = ModelCreditSettings(
        method=args.method,
        model_dir=args.model,
        engine=args.engine,
        device=args.device,
        allow_pickle=args.allow_pickle,
        answer_regex=ANSWER_REGEX if args.answer_regex is None else args.answer_regex,
        negative_template=NEGATIVE_TEMPLATE if args.negative_prompt is None else args.negative_prompt,
        noise_std=args.noise_std,
        seed=args.seed,
        chunk_size=args.chunk_size,
    )
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())  # Ctrl-C: stop, store nothing
    bar = tqdm(desc=args.method, unit="seq", file=sys.stderr, disable=args.json and not sys.stderr.isatty())

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        rollouts = None if args.rollout is not None else parse_rollouts(args.rollouts)
        report = run_model_credit(
            handle,
            args.run,
            settings,
            rollout=args.rollout,
            rollouts=rollouts,
            progress=progress,
            cancel=stop.is_set,
        )
    finally:
        bar.close()
        signal.signal(signal.SIGINT, previous)
    if args.json:
        print(json.dumps(report.to_json()))
    elif report.cancelled:
        print(f"model-credit {args.method} for {args.run!r}: cancelled; nothing was stored", file=sys.stderr)
    else:
        note = f"; no answer in {len(report.no_answer)} (weights 1)" if report.no_answer else ""
        print(
            f"model-credit {args.method} for {args.run!r}: {report.stored} rollouts scored, "
            f"{report.model_rows} model sequences in {report.seconds:.1f}s ({report.engine}){note}; stored"
        )
        for step, used in report.models.items():
            print(f"  step {step}: {used['why']}")
    return 130 if report.cancelled else 0
