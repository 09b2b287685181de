"""`creditlens score`, `creditlens resample` and `creditlens environment`: the model-backed commands, and the
agent environment they run (`backend.models.environments`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from backend.cli.common import add_db_arg, add_model_args
from backend.core.errors import InputError
from backend.rewards import get_verifier
from backend.store import checkpoints, open_store
from backend.store.checkpoint_queries import rollout_steps
from backend.store.model_queries import rollouts_to_score


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("score", help="fill missing logprobs/entropies of a run with a model")
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name (see `creditlens runs`)")
    add_model_args(p, engines=False)
    p.add_argument("--all", action="store_true", help="rescore every rollout, not only those missing arrays")
    p.add_argument("--chunk-size", type=int, default=16, help="rollouts per forward pass (default 16)")
    p.set_defaults(func=cmd_score)

    p = subparsers.add_parser("resample", help="Monte Carlo values V(s_t) by sampling suffixes at positions")
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name (see `creditlens runs`)")
    p.add_argument("--rollout", type=int, required=True, help="rollout id")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--positions", help="comma-separated response positions, e.g. 3,17")
    where.add_argument(
        "--suggest",
        help="entropy:K (top-K entropy) or steps (after each line end): the Resample view's suggestions",
    )
    p.add_argument("--samples", type=int, default=8, help="suffixes per position, M (default 8)")
    add_model_args(p)
    p.add_argument("--verifier", default=None, help="verifier name or module:function (default: the run's)")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="longest suffix in tokens (default: twice the response's length plus 16)",
    )
    p.add_argument(
        "--temperature", type=float, default=1.0, help="sampling temperature of the suffixes (default 1.0)"
    )
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling's top-p (default 1.0: off)")
    p.add_argument(
        "--seed", type=int, default=0, help="sampling seed; the same seed draws the same suffixes (default 0)"
    )
    p.add_argument(
        "--environment",
        default=None,
        help="an agent run's tool loop for the suffixes: calculator, or module:attribute (an Environment or "
        "a list of tool functions); default: the run's (`creditlens environment`)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print {positions, tokens, seconds, samples} as JSON (each sample's transcript by turn)",
    )
    p.set_defaults(func=cmd_resample)

    p = subparsers.add_parser(
        "environment",
        help="the agent environment (tool loop) resampling and the teacher run for a run: show, set or clear",
    )
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name (see `creditlens runs`)")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--set",
        default=None,
        metavar="NAME",
        help="calculator (the demo's), or module:attribute: an Environment or a list of plain Python "
        "tool functions, as TRL's GRPOTrainer(tools=[...]) takes them",
    )
    which.add_argument("--clear", action="store_true", help="forget the run's environment")
    p.set_defaults(func=cmd_environment)


def _is_list(value) -> bool:
    return isinstance(value, (list, tuple, np.ndarray))


def _check_ids(ids, vocab_size: int, what: str) -> None:
    if ids is not None and len(ids) and (max(ids) >= vocab_size or min(ids) < 0):
        raise InputError(
            f"{what}: token id {max(ids)} is outside the model's vocabulary ({vocab_size}); the run was "
            f"tokenized with another tokenizer — re-import it with --model pointing at this model"
        )


def cmd_score(args) -> int:
    """Each rollout is scored with its step's checkpoint (or the --model named on purpose): one engine per
    model, and the command says which model scored which steps."""
    from backend.models import load_engine  # noqa: PLC0415 - heavy (torch); see backend/cli/__init__.py

    with open_store(args.db) as store:
        todo = rollouts_to_score(store, args.run, only_missing=not args.all)
        steps = rollout_steps(store, args.run, todo["rollout_id"])
        choices = checkpoints.choices_for(store, args.run, set(steps.values()), args.model)
    if not len(todo):
        print(f"run {args.run!r}: every rollout already has logprobs and entropies (use --all to rescore)")
        return 0
    todo = todo.assign(model=[choices[steps[int(r)]].model_dir for r in todo["rollout_id"]])
    arrays, tokens = {}, 0
    for folder, rows in todo.groupby("model", sort=False):
        engine = load_engine(
            folder, engine="transformers", device=args.device, allow_pickle=args.allow_pickle
        )
        scored, n = _score_rows(engine, rows, args)
        arrays.update(scored)
        tokens += n
    with open_store(args.db) as store:
        store.update_token_arrays(args.run, arrays)
    print(f"scored {len(arrays)} rollouts ({tokens} tokens) of run {args.run!r}")
    for step, choice in choices.items():
        print(f"  step {step}: {choice.why} [{choice.label}]")
    return 0


def _score_rows(engine, todo, args) -> tuple[dict, int]:
    """Logprobs and entropies of the rows of `rollouts_to_score` under `engine`; (arrays, tokens)."""
    vocab = engine.model.get_output_embeddings().weight.shape[0]
    prompts, responses = [], []
    for row in todo.itertuples():
        # DuckDB hands a NULL list to pandas as pd.NA (not None): test for a real sequence.
        prompt_ids = list(row.prompt_ids) if _is_list(row.prompt_ids) else engine.encode(row.prompt or "")
        token_ids = list(row.token_ids)
        _check_ids(prompt_ids, vocab, f"run {args.run!r} rollout {row.rollout_id} prompt_ids")
        _check_ids(token_ids, vocab, f"run {args.run!r} rollout {row.rollout_id} token_ids")
        prompts.append(prompt_ids)
        responses.append(token_ids)
    with tqdm(
        total=len(todo), desc=f"scoring ({Path(engine.model_dir).name})", unit="rollout", file=sys.stderr
    ) as bar:
        last = [0]

        def progress(done: int, total: int) -> None:
            bar.update(done - last[0])
            last[0] = done

        scored = engine.score(prompts, responses, chunk_size=args.chunk_size, progress=progress)
    arrays = {
        int(rid): {"logprobs": s.logprobs.tolist(), "entropies": s.entropies.tolist()}
        for rid, s in zip(todo["rollout_id"], scored, strict=True)
    }
    return arrays, sum(len(r) for r in responses)


def parse_positions(text: str) -> list[int]:
    try:
        return [int(p) for p in text.replace(" ", "").split(",") if p]
    except ValueError as exc:
        raise InputError(f"--positions {text!r}: expected comma-separated integers like 3,17") from exc


def cmd_resample(args) -> int:
    from backend.models import load_engine  # noqa: PLC0415 - heavy (torch); see backend/cli/__init__.py
    from backend.models.agent_resample import (  # noqa: PLC0415 - idem
        check_agent_positions,
        resamplable,
        resample_tool_loop,
    )
    from backend.models.environments import run_environment  # noqa: PLC0415 - idem
    from backend.models.resample import check_positions, parse_suggestion, resample  # noqa: PLC0415 - idem

    # The store is opened only to read the rollout and to save the samples, so other readers are not
    # locked out while the model runs.
    with open_store(args.db) as store:
        info = store.run_info(args.run)
        rollout = store.rollout(args.run, args.rollout)
        choice = checkpoints.rollout_model(store, args.run, args.rollout, args.model)
    verifier = args.verifier or info.get("verifier") or "answer_match"
    ground_truth = rollout.get("ground_truth")
    if ground_truth is None:
        ground_truth = (rollout.get("meta") or {}).get("ground_truth")
    if ground_truth is None and ":" not in verifier:
        raise InputError(
            f"run {args.run!r} rollout {args.rollout} has no ground truth (meta.ground_truth) "
            f"for verifier {verifier!r}"
        )
    if args.samples < 1:
        raise InputError(f"--samples must be >= 1, got {args.samples}")
    get_verifier(verifier)  # an unknown name fails before any model is loaded
    environment = run_environment(info, args.environment)  # an agent run's tool loop, or None
    tool_loop = environment is not None and bool(rollout.get("turns"))
    token_ids = list(rollout["token_ids"])
    if args.positions is not None:  # refused before a model loads, multi-turn positions too
        positions = check_agent_positions(
            check_positions(parse_positions(args.positions), len(token_ids)), rollout, tool_loop
        )
    engine = load_engine(
        choice.model_dir, engine=args.engine, device=args.device, allow_pickle=args.allow_pickle
    )
    prompt_ids = (
        list(rollout["prompt_ids"])
        if rollout.get("prompt_ids") is not None
        else engine.encode(rollout.get("prompt") or "")
    )
    tokens = list(rollout["tokens"]) if rollout.get("tokens") is not None else engine.token_texts(token_ids)
    if args.positions is None:
        entropies = rollout.get("entropies")
        positions = parse_suggestion(args.suggest, tokens, None if entropies is None else list(entropies))
        positions = resamplable(positions, rollout, tool_loop)  # an agent run's: off the tool's tokens
    with tqdm(
        total=len(positions) * args.samples,
        desc="resampling",
        unit="suffix",
        file=sys.stderr,
        disable=args.json and not sys.stderr.isatty(),
    ) as bar:
        last = [0]

        def progress(done: int, total: int) -> None:
            bar.update(done - last[0])
            last[0] = done

        common = dict(
            samples=args.samples,
            verifier=verifier,
            ground_truth=ground_truth,
            temperature=args.temperature,
            top_p=args.top_p,
            seed=args.seed,
            progress=progress,
        )
        if tool_loop:
            turns = rollout["turns"]
            result = resample_tool_loop(
                engine, environment, prompt_ids, token_ids, turns, positions, **common
            )
        else:
            result = resample(
                engine, prompt_ids, token_ids, positions, max_new_tokens=args.max_new_tokens, **common
            )
    with open_store(args.db) as store:
        store.save_resample(args.run, args.rollout, result.table().assign(on_policy=choice.on_policy))
    if args.json:
        out = {**result.to_json(), "model": choice.model_dir, "on_policy": choice.on_policy}
        out["environment"] = environment.name if tool_loop else None
        print(json.dumps({**out, "samples": [s.to_json() for s in result.samples]}))
        return 0
    _print_resample(args, result, tokens, choice, engine.name, verifier, environment if tool_loop else None)
    return 0


def _print_resample(args, result, tokens, choice, engine_name: str, verifier: str, environment) -> None:
    print(
        f"rollout {args.rollout} of {args.run!r}: {len(result.samples)} suffixes, {result.tokens} tokens, "
        f"{result.seconds:.2f}s ({engine_name}, verifier {verifier})"
    )
    print(f"model: {choice.why} [{choice.label}]")
    if environment is not None:
        calls = sum(t["role"] != "assistant" for s in result.samples for t in s.turns)
        print(
            f"through the run's tool loop ({environment.name}): {calls} tool answers in the suffixes "
            "(--json gives each sample's transcript)"
        )
    print(f"{'pos':>5} {'token':>8} {'V(s_t)':>8} {'stderr':>8} {'n':>4}")
    for p in result.positions:
        shown = repr(tokens[p.pos]) if p.pos < len(tokens) else "<end>"
        err = "-" if p.stderr != p.stderr else f"{p.stderr:.3f}"
        print(f"{p.pos:>5} {shown:>8} {p.value:>8.3f} {err:>8} {p.n:>4}")


def cmd_environment(args) -> int:
    from backend.models.environments import META_KEY, get_environment  # noqa: PLC0415 - idem

    if args.set is not None:
        environment = get_environment(args.set)  # a name that does not load is refused, nothing stored
        with open_store(args.db) as store:
            store.set_run_meta(args.run, META_KEY, args.set)
        print(f"run {args.run!r}: environment {environment.name!r} (up to {environment.max_turns} turns)")
        return 0
    with open_store(args.db) as store:
        if args.clear:
            store.set_run_meta(args.run, META_KEY, None)
        spec = store.run_info(args.run)["meta"].get(META_KEY)
    print(
        f"run {args.run!r}: " + (f"environment {spec!r}" if spec else "no environment (policy-only suffixes)")
    )
    return 0
