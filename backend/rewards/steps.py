"""Step verifiers: a score for every step (line) of a response, the evidence of the process channel.

A step verifier is `fn(prompt, response, ground_truth) -> list[Step]`: one `Step` per line of the
response, in order, covering it. Scores follow the rule channels' convention (higher is better,
0.0 clean, negative violated): 0.0 for a step that checks out or that claims nothing checkable,
-1.0 for a wrong step. `step_token_rewards` projects the scores onto tokens: each step's score on the
token holding the step's last character (its newline; the last token for the last line), which is
where the channels module puts step-granular rewards ("process: step rewards at step ends").

`arithmetic_steps` checks the demo task (`backend.demo.task`): a column line `x+y[+c]=s[ carry k]`
must add up (x + y + c = s), take the carry the line above announced (c, 0 when none), announce the
carry its own sum gives (k = s // 10, none when 0) and, when the prompt reads `a+b=?`, use the digits of
column k of a and b (one line per column, least significant first, no extra columns). An answer line
(any line with `####`, or a last line that is not a column line) must hold the ground truth (else
a + b from the prompt). Lines without digits ("let me think") claim nothing; any other line with
digits that is neither (`6=14 carry 1`) is a wrong step. Each error is counted on the line where it
is made: a line that copies a wrong carry from the line above is judged against that carry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from backend.rewards.answers import extract_answer, parse_int
from backend.rewards.rules import token_offsets

COLUMN = re.compile(r"(\d+)\+(\d+)(?:\+(\d+))?=(\d+)(?:[ \t]*carry[ \t]*(\d+))?")
PROBLEM = re.compile(r"^\s*(\d+)\s*\+\s*(\d+)\s*=")
WRONG, CLEAN = -1.0, 0.0


@dataclass(frozen=True)
class Step:
    """Characters [start, end) of the response form one step (a line, its newline included when it
    has one); `score` 0.0 (checks out or claims nothing) or negative (wrong); `note` says why."""

    start: int
    end: int
    score: float
    note: str


StepVerifier = Callable[[str, str, object], list[Step]]


def lines(response: str) -> list[tuple[int, int, str]]:
    """(start, end, text) of every line; `end` includes the line's newline when it has one."""
    out, offset = [], 0
    for text in response.split("\n"):
        end = min(offset + len(text) + 1, len(response))
        out.append((offset, end, text))
        offset += len(text) + 1
    return out


def operands(prompt: str | None) -> tuple[int, int] | None:
    """(a, b) of a prompt that starts `a+b=`, else None."""
    m = PROBLEM.match(prompt or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _digit(n: int, k: int) -> int:
    return (n // 10**k) % 10


def _column_errors(m: re.Match, k: int, carry_in: int, problem: tuple[int, int] | None) -> list[str]:
    """What is wrong with column line number k (0 = units), given the carry the line above announced."""
    x, y, total = int(m.group(1)), int(m.group(2)), int(m.group(4))
    c = int(m.group(3)) if m.group(3) is not None else 0
    carry_out = int(m.group(5)) if m.group(5) is not None else 0
    errors = []
    if problem is not None:
        a, b = problem
        if k >= max(len(str(a)), len(str(b))):
            errors.append(f"column {k + 1} does not exist in {a}+{b}")
        elif (x, y) != (_digit(a, k), _digit(b, k)):
            errors.append(f"column {k + 1} adds {_digit(a, k)}+{_digit(b, k)}, not {x}+{y}")
    if c != carry_in:
        errors.append(f"carry in {c}, but the line above carried {carry_in}")
    if x + y + c != total:
        errors.append(f"{x}+{y}{f'+{c}' if c else ''} is {x + y + c}, not {total}")
    if carry_out != total // 10:
        errors.append(f"{total} carries {total // 10}, not {carry_out}")
    return errors


def arithmetic_steps(prompt: str | None, response: str, ground_truth) -> list[Step]:
    """Judge every line of a worked column addition (see the module docstring)."""
    problem = operands(prompt)
    truth = parse_int(ground_truth if not isinstance(ground_truth, str) else ground_truth.strip())
    if truth is None and problem is not None:
        truth = sum(problem)
    spans = lines(response)
    last_content = max((i for i, (_, _, t) in enumerate(spans) if t.strip()), default=-1)
    steps, k, carry_in = [], 0, 0
    for i, (start, end, text) in enumerate(spans):
        column = COLUMN.search(text) if "####" not in text else None
        if column is not None:
            errors = _column_errors(column, k, carry_in, problem)
            carry_in = int(column.group(5)) if column.group(5) is not None else 0
            k += 1
            note = "; ".join(errors) or f"column {k} checks"
            steps.append(Step(start, end, WRONG if errors else CLEAN, note))
        elif "####" in text or (i == last_content and re.search(r"\d", text)):
            got = extract_answer(text)
            if truth is None:
                steps.append(Step(start, end, CLEAN, "answer line (no ground truth to check it against)"))
            elif got == truth:
                steps.append(Step(start, end, CLEAN, f"answer {got} is right"))
            else:
                shown = "no integer" if got is None else got
                steps.append(Step(start, end, WRONG, f"answer {shown}, expected {truth}"))
        elif re.search(r"\d", text):
            steps.append(Step(start, end, WRONG, "digits that are neither a column sum nor the answer"))
        else:
            steps.append(Step(start, end, CLEAN, "no claim to check"))
    return steps


def step_token_rewards(steps: Sequence[Step], tokens: Sequence[str]) -> list[float]:
    """(L,) each step's score on the token holding its last character, 0.0 elsewhere (scores of steps
    ending in the same token add up). Offsets come from `tokens`, whose text must join to the response
    the steps were found in."""
    offsets = token_offsets(tokens)
    ends = [b for _, b in offsets]
    reward = [0.0] * len(tokens)
    for step in steps:
        if step.end <= step.start or not tokens:
            continue
        # the first token whose end passes the step's last character
        lo, hi = 0, len(ends) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if ends[mid] >= step.end:
                hi = mid
            else:
                lo = mid + 1
        reward[lo] += step.score
    return reward


def first_wrong(steps: Sequence[Step]) -> int | None:
    """Index of the first step with a negative score, or None."""
    return next((i for i, s in enumerate(steps) if s.score < 0), None)
