"""`creditlens init | import | runs | delete | token-classes`."""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

from backend.cli.common import add_db_arg, add_workers_args
from backend.cli.monitor import live_monitor
from backend.core.errors import InputError, StoreError
from backend.credit import main_channel, token_classes
from backend.ingest import FORMATS, import_path
from backend.ingest.follow import follow
from backend.store import open_store
from backend.store.connection import interrupted
from backend.store.handle import kept_only_on_success


def cmd_init(args) -> int:
    # The bundled teacher's file reader lives with the model jobs (torch).
    from backend.demo.bundled import import_bundled  # noqa: PLC0415 - heavy (torch); see backend/cli

    with open_store(args.db, create=True) as store:
        names = import_bundled(store)
        print(
            f"store ready at {store.path}; bundled runs imported: "
            f"{', '.join(names) or 'none (already there)'}"
        )
    return 0


def _channel_names(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names:
        raise InputError(f"--channels {text!r}: expected column names separated by commas, e.g. a,b")
    return names


def cmd_import(args) -> int:
    options = {
        "model_dir": args.model,
        "verifier": args.verifier,
        "channels": _channel_names(args.channels),
        "group_size": args.group_size,
        "main_channel": args.main_channel,
        "append": args.append,
    }
    if args.follow:
        return _follow(args, options)
    with kept_only_on_success(args.db):
        before = None
        try:
            with open_store(args.db, create=True) as store:
                before = _rollouts_in(store, args.run)
                report = import_path(
                    store,
                    args.path,
                    args.run,
                    fmt=args.format,
                    show_progress=not args.quiet,
                    **options,
                )
            if args.format is None:
                print(f"detected format: {report.format}", file=sys.stderr)
            print(report.message())
        except BaseException as exc:
            # Ctrl-C can land after the import's COMMIT, or inside it and the COMMIT still lands: the store
            # says which. Nothing committed goes on to the usual "nothing was committed" (exit 130).
            if not interrupted(exc) or before is None:
                raise
            exc.__traceback__ = None  # its frames hold the interrupted import's store
            added = _committed(args.db, args.run) - before
            if not added:
                raise
            print(
                f"creditlens import: interrupted after the import was committed: run {args.run!r} has its "
                f"{added} new rollouts",
                file=sys.stderr,
            )
            return 130
    return 0


def _committed(db, run: str) -> int:
    """The run's rollouts as the store file holds them, read on a new connection once the import's is
    closed: a COMMIT that Ctrl-C interrupted can still have been written (its WAL replays on the next open)
    while the interrupted connection reads the store as before it."""
    gc.collect()  # the interrupted import's connections, held by the traceback's frames until collected
    try:
        with open_store(db, read_only=True) as store:
            return _rollouts_in(store, run)
    except StoreError:  # no store file: nothing was committed
        return 0


def _rollouts_in(store, run: str) -> int:
    return store.next_rollout_id(store.run_id(run)) if store.has_run(run) else 0


def _follow(args, options: dict) -> int:
    totals = {"files": 0, "rollouts": 0}
    watch = live_monitor(args) if args.monitor or args.monitor_config else None

    def report(rep, path) -> None:
        totals["files"] += 1
        totals["rollouts"] += rep.records
        print(f"{path.name}: {rep.message()}", flush=True)

    def busy(exc, path) -> None:
        print(f"{path.name}: waiting: {exc}; trying again", file=sys.stderr, flush=True)

    def waiting(path) -> None:
        print(
            f"waiting for {path} to appear (the trainer creates it with its first step); Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )

    print(f"following {args.path} into run {args.run!r}; Ctrl-C stops", file=sys.stderr, flush=True)
    try:
        follow(
            lambda: open_store(args.db, create=True),
            args.path,
            args.run,
            fmt=args.format,
            on_report=report,
            on_busy=busy,
            on_waiting=waiting,
            on_batch=None if watch is None else lambda: watch(args.run),  # once per poll that imported
            poll_seconds=args.poll,
            **options,
        )
    except BaseException as exc:
        # Ctrl-C as Python raises it, or as DuckDB does when it lands inside a query (the poll's reads, the
        # monitors'): both stop following. It once escaped as DuckDB's and the follower said "interrupted;
        # nothing was committed" after it had imported every step (tests/browser/test_live_browser.py).
        if not interrupted(exc):
            raise
        exc.__traceback__ = None  # its frames hold the interrupted store's connection
    # the file in progress was imported whole or not at all
    print(
        f"stopped following {args.path}: {totals['rollouts']} rollouts from {totals['files']} files",
        flush=True,
    )
    return 0


def cmd_runs(args) -> int:
    with open_store(args.db, read_only=True) as store:
        runs = store.list_runs()
    if args.json:
        print(json.dumps(runs, indent=2))
        return 0
    if not runs:
        print("no runs; `creditlens init` imports the bundled samples")
        return 0
    width = max(len("channels"), *(len(",".join(r["channels"])) for r in runs))
    header = (
        f"{'name':<24} {'source':<22} {'rollouts':>8} {'groups':>7} {'steps':>5} {'tokens':>10}  "
        f"{'main':<12} {'channels':<{width}}  metrics"
    )
    print(header)
    for r in runs:
        print(
            f"{r['name'][:24]:<24} {str(r['source'])[:22]:<22} {r['rollouts']:>8} {r['groups']:>7} "
            f"{r['steps']:>5} {r['tokens']:>10}  {r['main_channel'][:12]:<12} "
            f"{','.join(r['channels']):<{width}}  {','.join(r['metrics']) or '-'}"
        )
    return 0


def cmd_main_channel(args) -> int:
    """Show the run's main channel, or set it (a channel of the run, or `all`)."""
    if args.channel is None:
        with open_store(args.db, read_only=True) as store:
            main, choices = store.main_channel(args.run), main_channel.channel_choices(store, args.run)
        print(f"{args.run}: main channel {main} (choices: {', '.join(choices)})")
        return 0
    with open_store(args.db) as store:
        chosen = main_channel.set_main_channel(store, args.run, args.channel)
    print(f"{args.run}: main channel is now {chosen}")
    return 0


def cmd_delete(args) -> int:
    with open_store(args.db) as store:
        store.delete_run(args.run)
    print(f"deleted run {args.run!r}")
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("init", help="create/migrate the store and import the bundled sample runs")
    add_db_arg(p)
    p.set_defaults(func=cmd_init)
    _add_import(sub)

    p = sub.add_parser("runs", help="list runs with their sizes, channels and per-rollout metrics")
    add_db_arg(p)
    p.add_argument("--json", action="store_true", help="print the runs as a JSON list of objects")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser(
        "main-channel",
        help="show or set a run's main channel (what views and commands read when no --channel is given)",
    )
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name (see `creditlens runs`)")
    p.add_argument(
        "channel",
        nargs="?",
        default=None,
        metavar="C|all",
        help="a channel of the run, or all (the channel scores summed per rollout); omit to show",
    )
    p.set_defaults(func=cmd_main_channel)

    p = sub.add_parser("delete", help="delete a run and everything stored for it")
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name (see `creditlens runs`)")
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("token-classes", help="show or set a run's token classes (credit by class)")
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name (see `creditlens runs`)")
    p.add_argument(
        "--add",
        nargs=3,
        action="append",
        default=[],
        metavar=("NAME", "KIND", "PATTERN"),
        help="append a class: KIND regex (matched in each token), phrases ('|'-separated, "
        "matched in the response text) or marker (key, style span); repeatable",
    )
    p.add_argument(
        "--move",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "WHERE"),
        help="move a class up, down, first or last (the first class that matches a token wins); "
        "repeatable, applied after --add",
    )
    p.add_argument("--reset", action="store_true", help="back to the default classes")
    p.add_argument("--json", action="store_true", help="print the classes as JSON")
    p.set_defaults(func=cmd_token_classes)


def _add_import(sub) -> None:
    """`creditlens import` and its options (formats, channels, groups, models, follow)."""
    p = sub.add_parser("import", help="import a run (native JSONL/Parquet, verl dump, TRL completions)")
    p.add_argument(
        "path",
        type=Path,
        help="a file or folder of rollouts (the format is detected unless --format names it); required",
    )
    add_db_arg(p)
    p.add_argument(
        "--run",
        required=True,
        help="run name (created if new; re-importing a file adds nothing; other content into an "
        "existing run is refused without --append)",
    )
    p.add_argument(
        "--append",
        action="store_true",
        help="add to the existing run of this name on purpose (its model and channels must match)",
    )
    p.add_argument("--format", choices=FORMATS, default=None, help="default: detect")
    add_workers_args(p, "the pieces of a native file (read, validated, converted; one writer commits)")
    p.add_argument(
        "--model",
        default=None,
        help="local HF folder whose tokenizer re-tokenizes text; or the checkpoint of each "
        "step: a template such as ckpts/step_{step}, or a JSON/TOML file of step -> folder",
    )
    p.add_argument(
        "--channels",
        default=None,
        metavar="A,B",
        help="columns (trl) or keys (verl) that become reward channels; other numbers become "
        "per-rollout metrics, the rest meta (default: trl float columns; verl score)",
    )
    p.add_argument(
        "--main-channel",
        default=None,
        metavar="C|all",
        help="the run's main channel, what views and commands read by default (default: task, "
        "else the run's one channel, else all: the channel scores summed per rollout)",
    )
    p.add_argument(
        "--group-size",
        type=int,
        default=None,
        metavar="N",
        help="trl: groups are consecutive blocks of N rows (TRL's num_generations)",
    )
    p.add_argument(
        "--follow",
        action="store_true",
        help="keep watching the directory and import each new step file as it appears (Ctrl-C)",
    )
    p.add_argument(
        "--poll",
        type=float,
        default=1.0,
        help="--follow: seconds between looks at the directory (default 1.0)",
    )
    p.add_argument(
        "--monitor",
        action="store_true",
        help="--follow: run the credit-health monitors (creditlens monitor) after each poll that imported "
        "step files and print the alerts as they appear",
    )
    p.add_argument(
        "--monitor-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="--follow: the monitors' TOML settings (implies --monitor; docs/monitors.md)",
    )
    p.add_argument("--verifier", default=None, help="verifier name or module:function recorded with the run")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_import)


def cmd_token_classes(args) -> int:
    """Classes are kept in the run's meta; --add and --move start from the run's current classes."""
    changes = bool(args.add or args.move)
    with open_store(args.db, read_only=not (changes or args.reset)) as store:
        saved = store.run_info(args.run)["meta"].get("token_classes")
        classes = token_classes.from_json(None if args.reset else saved)
        if args.add:
            added = tuple(
                token_classes.TokenClass(name, kind, token_classes.parse_pattern(kind, pattern))
                for name, kind, pattern in args.add
            )
            classes = token_classes.from_json(token_classes.to_json(classes + added))
        for name, where in args.move:
            classes = token_classes.move(classes, name, where)
        if changes or args.reset:
            token_classes.save(store, args.run, None if args.reset and not changes else classes)
    if args.json:
        print(json.dumps(token_classes.to_json(classes)))
        return 0
    for c in classes:
        print(f"{c.name:<16} {c.kind:<8} {token_classes.shown_pattern(c)}")
    print(f"{token_classes.OTHER:<16} (every other token)")
    return 0
