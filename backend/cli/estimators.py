"""`creditlens estimators [--json]` and `creditlens estimate ... --out FILE.parquet`."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq

from backend.cli import estimator_catalog
from backend.cli.common import ESTIMATOR_HELP, add_db_arg, add_set_arg, add_workers_args, parse_overrides
from backend.core.chunks import DEFAULT_CHUNK_ROLLOUTS
from backend.core.errors import InputError
from backend.credit import as_trained
from backend.store import store_handle


def add_commands(sub) -> None:
    p = sub.add_parser("estimators", help="list estimators with their parameters (defaults, ranges)")
    p.add_argument("--json", action="store_true", help="machine-readable output (what the app renders)")
    p.set_defaults(func=cmd_estimators)

    p = sub.add_parser(
        "estimate", help="run an estimator on a stored run; one Parquet row per real token, with its class"
    )
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name")
    p.add_argument("--estimator", default=None, help=ESTIMATOR_HELP)
    add_set_arg(p)
    p.add_argument(
        "--channel",
        default=None,
        help="reward channel (default: the run's main channel, see `creditlens runs`); 'all': the "
        "channel scores summed per rollout (missing ones skipped; TRL's combined reward)",
    )
    p.add_argument("--out", required=True, type=Path, help="output .parquet file")
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="recompute even when the store holds this estimator's output for this config",
    )
    p.add_argument(
        "--chunk",
        type=_chunk_arg,
        default=DEFAULT_CHUNK_ROLLOUTS,
        metavar="N|none",
        help=f"rollouts per streamed chunk of a group-scoped estimator (default "
        f"{DEFAULT_CHUNK_ROLLOUTS}; step scope: one step, run scope: the run); 'none': "
        "the whole run in memory at once",
    )
    add_workers_args(p)
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("explain", help="why one rollout's tokens got their credit (the Rollout view)")
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name")
    p.add_argument("--rollout", required=True, type=int, help="rollout id")
    p.add_argument("--estimator", default=None, help=ESTIMATOR_HELP)
    add_set_arg(p)
    p.add_argument(
        "--channel",
        default=None,
        help="the channel the estimator reads, whose terms are shown (default: the run's main "
        "channel); 'all': the channel scores summed per rollout",
    )
    p.add_argument(
        "--beta",
        action="append",
        default=[],
        metavar="CHANNEL=VALUE",
        help="β of a channel in A_final, repeatable (default: the run's defaults)",
    )
    p.add_argument(
        "--norm",
        action="append",
        default=[],
        metavar="CHANNEL=MODE",
        help="a channel's normalization (group, batch, none), repeatable (default: the run's)",
    )
    p.add_argument("--pos", type=int, default=None, help="also print the derivation of A at this token")
    p.add_argument(
        "--json",
        action="store_true",
        help="tokens, channels{name: {advantage, contribution}}, final, terms as JSON",
    )
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser(
        "logged-gap", help="per rollout: the trainer's logged advantage, a recomputed one, and their gap"
    )
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name")
    p.add_argument(
        "--estimator",
        default=None,
        help="the recomputing estimator (default: as_trained, the trainer's recipe rebuilt; grpo on a run "
        "without one)",
    )
    add_set_arg(
        p,
        "estimator parameter, repeatable (default: the trainer's epsilon and scaling where the run "
        "keeps them, as TRL imports and recordings do)",
    )
    p.add_argument(
        "--channel",
        default=None,
        help="reward channel, or 'all' (summed, as TRL does); default: the run's main channel",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object per rollout")
    out.add_argument("--out", type=Path, default=None, help="write a .parquet file")
    p.set_defaults(func=cmd_logged_gap)


def _chunk_arg(text: str) -> int | None:
    if text == "none":
        return None
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of rollouts or 'none', got {text!r}")
    return int(text)


def _jsonable(value):
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, tuple):
        return list(value)
    return value


def cmd_estimators(args) -> int:
    schemas = estimator_catalog.schemas()  # the registry's schemas, without importing the estimators
    if args.json:
        for schema in schemas:
            for f in schema["fields"]:
                f["default"] = _jsonable(f["default"])
        json.dump(schemas, sys.stdout, indent=2)
        print()
        return 0
    for schema in schemas:
        print(f"{schema['name']:<18} [{schema['family']}, {schema['scope']} scope] {schema['description']}")
        if schema["source"]:
            print(f"    source: {schema['source']}")
        if schema["aliases"]:
            print(f"    deprecated aliases: {', '.join(schema['aliases'])} (still accepted, with a warning)")
        for f in schema["fields"]:
            rng = ""
            if f["choices"]:
                rng = " {" + ", ".join(map(str, f["choices"])) + "}"
            elif f["low"] is not None or f["high"] is not None:
                rng = f" [{f['low']}, {f['high']}]"
            print(f"    {f['name']:<14} = {f['default']!r:<12}{rng}  {f['help']}")
    return 0


def cmd_logged_gap(args) -> int:
    from backend.credit.estimates import with_channel  # noqa: PLC0415 - heavy (torch); see backend/cli/__init__.py
    from backend.credit.token_rows import estimate_config  # noqa: PLC0415 - idem
    from backend.estimators.methods.logged import logged_gap  # noqa: PLC0415 - idem

    handle = store_handle(args.db)
    args.estimator = as_trained.chosen_estimator(handle, args.run, args.estimator)
    given = parse_overrides(args.overrides)
    name, _ = estimate_config(handle, args.run, args.estimator, given, args.channel)  # checks what was typed
    with handle.read() as store:
        defaults, notes = as_trained.trainer_overrides(store, args.run, name)
    kept = {k: v for k, v in defaults.items() if k not in given}
    _, config = estimate_config(handle, args.run, name, {**kept, **given}, args.channel)
    with handle.read() as store:
        batch = with_channel(store.load_batch(args.run), str(getattr(config, "channel", "-")))
    frame = logged_gap(batch, args.estimator, config)  # a run with no logged advantage stops here
    if kept:
        used = ", ".join(f"{k}={v}" for k, v in kept.items())
        print(
            f"note: recomputed with the trainer's {used}, kept with the run (--set overrides)",
            file=sys.stderr,
        )
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.out is not None:
        if args.out.suffix != ".parquet":
            raise InputError(f"{args.out}: the output must be a .parquet file")
        frame.to_parquet(args.out, index=False)
        print(f"wrote {len(frame)} rollouts to {args.out}")
    elif args.json:
        for row in frame.to_dict(orient="records"):
            print(json.dumps({k: _jsonable(v.item() if hasattr(v, "item") else v) for k, v in row.items()}))
    else:
        have = frame["gap"].notna()
        gap = frame.loc[have, "gap"].abs()
        print(
            f"{args.run}: {int(have.sum())} of {len(frame)} rollouts have a logged advantage; "
            f"|{args.estimator} - logged|: max {gap.max() if len(gap) else float('nan'):.3g}, "
            f"mean {gap.mean() if len(gap) else float('nan'):.3g}"
        )
        print(f"{'rollout':>8} {'group':>6} {'step':>5} {'logged':>10} {'recomputed':>11} {'gap':>10}")
        for r in frame.head(50).itertuples():
            print(
                f"{r.rollout_id:>8} {r.group_id:>6} {r.step:>5} {r.logged:>10.4f} {r.recomputed:>11.4f} "
                f"{r.gap:>10.2e}"
            )
        if len(frame) > 50:
            print(f"... {len(frame) - 50} more (--json or --out for all)")
    return 0


def cmd_estimate(args) -> int:
    if args.out.suffix != ".parquet":
        raise InputError(f"{args.out}: the output must be a .parquet file")
    if not args.out.parent.exists():
        raise InputError(f"{args.out}: directory {args.out.parent} does not exist")
    handle = store_handle(args.db)
    try:
        with handle.kept_open():  # the command's reads share one connection (each open costs 20-35 ms)
            _write_estimate(args, handle)
    finally:
        gc.unfreeze()  # called in-process (tests, a notebook): the caller's objects are collected as before
    return 0


def _write_estimate(args, handle) -> None:
    # The imports make ~210,000 objects that live as long as the process (most of them torch's): collecting
    # while they are made is wasted (the import took 0.94 CPU s with the collector off, 1.16 on), and every
    # later full collection would walk them again, so they are frozen out of it (a 2M-token estimate spent
    # ~0.2 of its ~2 CPU s after start in collections).
    collecting = gc.isenabled()
    gc.disable()
    try:
        from backend.credit.token_rows import (  # noqa: PLC0415 - heavy (torch, estimators); see backend/cli/__init__.py
            DICTIONARY_COLUMNS,
            TOKEN_ROWS_SCHEMA,
            estimate_config,
            token_rows,
            token_tables,
        )
    finally:
        if collecting:
            gc.enable()
    gc.freeze()

    args.estimator = as_trained.chosen_estimator(handle, args.run, args.estimator)
    name, config = estimate_config(
        handle, args.run, args.estimator, parse_overrides(args.overrides), args.channel
    )
    rows = token_tables(
        handle, args.run, name, config, chunk_rollouts=args.chunk, use_cache=not args.no_cache
    )
    # Write next to the target and rename, so a failure never leaves a half-written file.
    fd, tmp = tempfile.mkstemp(suffix=".parquet.tmp", dir=args.out.parent)
    os.close(fd)
    tokens = rollouts = 0
    try:
        # A writer thread builds and writes chunk k's rows while chunk k + 1 is computed (numpy and Arrow
        # release the GIL).
        with (
            pq.ParquetWriter(tmp, TOKEN_ROWS_SCHEMA, use_dictionary=DICTIONARY_COLUMNS) as writer,
            ThreadPoolExecutor(1) as writing,
        ):

            def write(batch, advantages) -> int:
                table = token_rows(batch, advantages, rows.classes)
                writer.write_table(table)
                return table.num_rows

            written = None
            for batch, advantages in rows.parts:
                if written is not None:
                    tokens += written.result()
                written = writing.submit(write, batch, advantages)
                rollouts += batch.B
            if written is not None:
                tokens += written.result()
        os.replace(tmp, args.out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    for note in rows.notes:
        print(f"note: {note}", file=sys.stderr)
    source = "from the store's cache" if rows.how == "cache" else "computed"
    print(f"wrote {tokens} tokens of {rollouts} rollouts to {args.out} ({source}), {rows.scope} scope")


def _betas_and_norms(args) -> tuple[dict[str, float], dict[str, str]]:
    """`--beta C=X` as floats and `--norm C=MODE` checked (InputErrors name the bad pair)."""
    betas = {}
    for key, value in parse_overrides(args.beta).items():
        try:
            betas[key] = float(value)
        except ValueError:
            raise InputError(f"--beta {key}={value}: not a number") from None
    norms = parse_overrides(args.norm)
    bad = {c: m for c, m in norms.items() if m not in ("group", "batch", "none")}
    if bad:
        raise InputError(
            "--norm "
            + ", ".join(f"{c}={m}" for c, m in bad.items())
            + ": a normalization is group, batch or none"
        )
    return betas, norms


def cmd_explain(args) -> int:
    from backend.credit import main_channel  # noqa: PLC0415 - heavy (torch); see backend/cli/__init__.py
    from backend.estimators import registry  # noqa: PLC0415 - idem
    from backend.views import explain  # noqa: PLC0415 - heavy (torch); see backend/cli/__init__.py

    handle = store_handle(args.db)
    with handle.read() as store:
        store.run_id(args.run)
    args.estimator = as_trained.chosen_estimator(handle, args.run, args.estimator)
    try:
        registry.get(args.estimator)
    except registry.UnknownEstimator as exc:
        raise InputError(str(exc)) from None
    overrides = as_trained.trainer_config(handle, args.run, args.estimator, parse_overrides(args.overrides))
    try:
        registry.make_config(args.estimator, **overrides)  # a bad --set fails before any work
    except ValueError as exc:
        raise InputError(f"--set: {exc}") from None
    betas, norms = _betas_and_norms(args)
    channel = main_channel.resolve(handle, args.run, overrides.get("channel", args.channel))
    try:
        result = explain.explain_rollout(
            handle,
            args.run,
            args.rollout,
            args.estimator,
            tuple(sorted(overrides.items())),
            channel,
            betas or None,
            norms or None,
        )
    except ValueError as exc:
        if not norms or "normalization" not in str(exc):
            raise
        raise InputError(f"--norm: {exc}") from None
    L = len(result.tokens)
    if args.pos is not None and not 0 <= args.pos < L:
        raise InputError(f"--pos {args.pos}: rollout {args.rollout} has {L} tokens (0..{L - 1})")
    credit = as_trained.credit_info(handle, args.run, args.estimator, list(result.channels), betas)
    if args.json:
        out = result.to_json(args.pos)
        out["credit"] = credit
        if args.pos is not None:
            out["derivation"] = {"pos": args.pos, "lines": result.derivation_at(args.pos, result.terms)}
        json.dump(out, sys.stdout)
        print()
        return 0
    names = list(result.channels)
    if credit["note"]:
        print(credit["note"])
    print(
        f"rollout {result.rollout_id} (group {result.group_id}), {args.estimator} on the outcome channels at "
        f"{result.scope} scope; columns: β_c·Ã_c per channel, then A_final"
    )
    print(f"{'pos':>4}  {'token':<14}" + "".join(f"{n[:10]:>11}" for n in names) + f"{'final':>11}")
    for t, token in enumerate(result.tokens):
        cells = "".join(f"{float(result.channels[n]['contribution'][t]):>11.4f}" for n in names)
        print(f"{t:>4}  {token!r:<14.14}{cells}{float(result.final[t]):>11.4f}")
    if args.pos is not None:
        _print_derivations(result, args.pos)
    return 0


def _print_derivations(result, pos: int) -> None:
    """Every channel's term of A_final at `pos` with its derivation, the sum, and the what-if on `all`."""
    from backend.views import explain  # noqa: PLC0415 - heavy (torch); see backend/cli/__init__.py

    if result.untrained_at(pos):  # no channel reaches it: one line, no formula
        print(f"\nwhy A at pos {pos} ({result.tokens[pos]!r}): {result.final_derivation(pos)[0]}")
        return
    print(f"\nwhy A at pos {pos} ({result.tokens[pos]!r}), channel by channel:")
    for name in result.channels:
        print(f"  {name}:")
        for line in result.channel_derivation(name, pos):
            print("    " + line)
    for line in result.final_derivation(pos):
        print("  " + line)
    if result.what_if is not None:
        print(f"  {result.what_if['label']}:")
        for line in explain.derivation(result.what_if["terms"], pos):
            print("    " + line)
