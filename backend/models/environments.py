"""The environments Credit Lens can run for an agent run: an assistant turn's text in, the tool's answer out.

Suffix resampling and the Monte Carlo teacher continue an agent episode the way the run's loop did
(`backend.models.tool_loop`): the policy writes until its turn ends, the environment answers (the tool's
tokens, never trained), the policy goes on, up to the run's turn limit. An `Environment` says what that
loop needs: where an assistant turn ends, the tool's answer to it (or None: the turn calls no tool and the
episode ends), and the turn limit and budgets.

A run names its environment in its meta (`environment`, set by `creditlens environment` or a bundled run's
manifest); `--environment` on `resample` and `teacher` names one for a single job. A name is either

- a known environment: `calculator` (the demo's: every column line the policy writes is answered by the
  calculator, `calc: 12`; a line with the `#### answer` ends the episode), or
- `module:attribute`, the hook for your own tools: the attribute is an `Environment`, or a list of plain
  Python callables, as TRL's `GRPOTrainer(tools=[...])` takes them, which `tool_environment` runs with the
  tool-call format TRL's chat templates write: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
  in the assistant turn, answered by `<tool_response>RESULT</tool_response>` (an exception's text as
  `{"error": ...}`, as TRL answers it).
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from backend.core.errors import InputError

META_KEY = "environment"
"""The run meta's key naming the run's environment."""


@dataclass(frozen=True)
class Environment:
    """What the tool loop needs to continue an episode of a run (see the module docstring)."""

    name: str
    respond: Callable[[str], str | None]
    """The environment's answer to one assistant turn's whole text (the tool's output, untrained tokens), or
    None when the turn calls no tool: the episode ends with it."""
    max_turns: int
    """Assistant turns per episode at most (the run's turn limit)."""
    turn_tokens: int
    """New tokens per assistant turn at most."""
    turn_end: str = "\n"
    """The text that ends an assistant turn (the turn keeps it); a turn that ends without it (the end token,
    or its budget) ends the episode."""
    tool_tokens: int = 12
    """Room kept for the tool's answer: an episode with no room left for it and a next turn ends."""


SUM = re.compile(r"(\d+(?:\+\d+)+)\s*=")


def calculator(line: str) -> str:
    """The demo's tool: its answer to an assistant line, the sum left of its `=`, or `error`."""
    match = SUM.search(line)
    value = sum(int(x) for x in match.group(1).split("+")) if match else "error"
    return f"calc: {value}\n"


def _demo_respond(line: str) -> str | None:
    return None if "####" in line else calculator(line)


CALCULATOR = Environment("calculator", _demo_respond, max_turns=5, turn_tokens=32)
"""The bundled agent run's environment (`backend.demo.agent`): a two-digit sum needs 3 turns (two columns
and the answer), a column line is about 16 characters."""

KNOWN = {"calculator": CALCULATOR}

TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)


def tool_environment(
    tools: Sequence[Callable],
    *,
    name: str = "tools",
    max_turns: int = 5,
    turn_tokens: int = 256,
    turn_end: str = "</tool_call>",
    tool_tokens: int = 64,
) -> Environment:
    """An environment over plain Python callables (each called by its `__name__` with the call's JSON
    arguments), in TRL's tool-call format (module docstring)."""
    by_name = {fn.__name__: fn for fn in tools}
    if not by_name or not all(callable(fn) for fn in tools):
        raise InputError(f"environment {name!r}: expected a list of callables (tools), got {tools!r}")

    def respond(text: str) -> str | None:
        match = TOOL_CALL.search(text)
        if match is None:
            return None
        try:
            call = json.loads(match.group(1))
            result = by_name[call["name"]](**(call.get("arguments") or {}))
        except Exception as exc:  # noqa: BLE001 - the policy's bad call is the tool's answer, as in TRL
            result = {"error": str(exc)}
        return f"<tool_response>\n{result}\n</tool_response>\n"

    return Environment(name, respond, max_turns, turn_tokens, turn_end, tool_tokens)


_USER_SPEC = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def get_environment(spec: str) -> Environment:
    """A known environment by name, or `module:attribute` (an `Environment`, or a list of tool callables)."""
    if spec in KNOWN:
        return KNOWN[spec]
    if not isinstance(spec, str) or not _USER_SPEC.fullmatch(spec):
        raise InputError(
            f"unknown environment {spec!r}; known: {', '.join(KNOWN)}, or give your own as module:attribute "
            "(an Environment or a list of tool functions)"
        )
    module_name, attribute = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"environment {spec!r}: cannot import module {module_name!r} ({exc})") from None
    found = getattr(module, attribute, None)
    if isinstance(found, Environment):
        return found
    if isinstance(found, (list, tuple)):
        return tool_environment(found, name=spec)
    raise InputError(
        f"environment {spec!r}: {attribute!r} of {module_name!r} is {type(found).__name__}, expected an "
        "Environment or a list of tool functions"
    )


def run_environment(info: dict, override: str | None = None) -> Environment | None:
    """The environment of a run (`Store.run_info`): `override` when given, else the one its meta names;
    None when neither names one (resampling then refuses positions before a tool's answer)."""
    spec = override or (info.get("meta") or {}).get(META_KEY)
    return get_environment(spec) if spec else None
