"""Arguments and parsing shared by the command modules (`--db`, `--model`, `--set KEY=VALUE`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from backend.core.errors import InputError
from backend.store import default_db_path


def add_db_arg(parser) -> None:
    parser.add_argument("--db", type=Path, default=None, help=f"store file (default {default_db_path()})")


def add_set_arg(parser, help: str = "estimator parameter, repeatable") -> None:
    """`--set KEY=VALUE`, repeatable, into `args.overrides` (parsed by `parse_overrides`)."""
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides", help=help
    )


def add_model_args(parser, engines: bool = True) -> None:
    parser.add_argument(
        "--model",
        default=None,
        help="local Hugging Face folder, used for every rollout on purpose (marked off-policy unless it is "
        "the checkpoint that sampled the rollout's step); default: each rollout's step checkpoint "
        "(`creditlens checkpoints`), else the model recorded with the run",
    )
    if engines:
        parser.add_argument(
            "--engine",
            choices=("auto", "transformers", "vllm"),
            default="auto",
            help="model engine (default auto: vLLM when installed and a GPU is present, else transformers)",
        )
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda when available)")
    parser.add_argument(
        "--allow-pickle",
        action="store_true",
        help="allow pickle (*.bin) weights; unpickling can run code, use only with trusted files",
    )


def whole_number(low: int):
    """An argparse type: an integer of at least `low`; argparse names the option in its error
    (`argument --limit: expected a whole number of at least 1, got '-5'`)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"expected a whole number of at least {low}, got {text!r}")
        return value

    return parse


def model_for(info: dict, model: str | None, run: str) -> str:
    model = model or info.get("model_dir")
    if not model:
        raise InputError(f"run {run!r} has no model recorded; pass --model DIR (a local Hugging Face folder)")
    return model


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--set {pair!r}: expected KEY=VALUE, e.g. --set kappa=0.9")
        out[key.strip()] = value.strip()
    return out


ESTIMATOR_DEFAULT = "default: the trainer's own advantage on a run a trainer made (as_trained), else grpo"
ESTIMATOR_HELP = (
    "estimator (see `creditlens estimators`); default: the run's trainer's own advantage (as_trained, or "
    "logged where its recipe cannot be rebuilt) on a run a trainer made, else grpo"
)


def add_workers_args(parser, what: str = "the run's chunks") -> None:
    """`--workers N` and `--ray auto|ADDRESS`: how a command that computes a whole run splits it
    (`backend.core.workers`); the command runs inside `workers.using(...)` (see `backend.cli.main`)."""
    parser.add_argument(
        "--workers",
        type=whole_number(1),
        default=None,
        metavar="N",
        help=f"processes that compute {what} (default: the machine's cores but one, left to the process "
        "that writes, for a run of 20M tokens or more; a smaller run, or a 2-core machine, stays in this "
        "process, which is faster than starting workers); the results are the same rows",
    )
    parser.add_argument(
        "--ray",
        default=None,
        metavar="auto|ADDRESS",
        help="compute them as tasks on a Ray cluster (auto: the cluster `ray start` made here; host:port; "
        "local:N starts one in this process); the store must be readable at the same path on its nodes",
    )
    parser.set_defaults(splits_run=True)
