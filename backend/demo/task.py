"""The demo policy's verifiable task: multi-digit addition with a short worked solution.

A prompt reads `47+85=?` and a clean response works column by column, then ends with the answer line:

    7+5=12 carry 1
    4+8+1=13
    #### 132

The training mix deliberately contains style and format noise (over-excited openers such as
"Obviously!!!", repeated fillers, answer lines that slip out of format) so that rollouts sampled from
the trained policy show the violations the style and format channels are meant to catch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

EXCITED = ("Obviously!!! ", "Easy!!! ", "Clearly!! ", "Wow!!! ")
FILLERS = ("so so ", "basically basically ", "um um ", "let me think, let me think\n", "well well ")


@dataclass(frozen=True)
class Noise:
    """Probabilities of each kind of noise in one training example."""

    excited: float = 0.2
    filler: float = 0.15
    format_slip: float = 0.12


def make_problem(rng: random.Random, three_digit_share: float = 0.35) -> tuple[int, int]:
    """Two operands: two-digit most of the time, three-digit otherwise (the harder, error-prone case)."""
    if rng.random() < three_digit_share:
        return rng.randint(100, 999), rng.randint(100, 999)
    return rng.randint(10, 99), rng.randint(10, 99)


def prompt_text(a: int, b: int) -> str:
    return f"{a}+{b}=?\n"


def worked_lines(a: int, b: int) -> list[str]:
    """Column-by-column addition, least significant digit first, one line per column."""
    da, db = str(a)[::-1], str(b)[::-1]
    carry, lines = 0, []
    for i in range(max(len(da), len(db))):
        x = int(da[i]) if i < len(da) else 0
        y = int(db[i]) if i < len(db) else 0
        total = x + y + carry
        line = f"{x}+{y}+{carry}={total}" if carry else f"{x}+{y}={total}"
        carry = total // 10
        lines.append(line + (f" carry {carry}" if carry else ""))
    return lines


def response_text(a: int, b: int, rng: random.Random | None = None, noise: Noise | None = None) -> str:
    """The worked solution and the final line `#### a+b`, with noise drawn from `rng` when given."""
    lines = worked_lines(a, b)
    answer = f"#### {a + b}"
    if rng is None or noise is None:
        return "\n".join(lines + [answer])
    if rng.random() < noise.filler:
        i = rng.randrange(len(lines))
        lines[i] = rng.choice(FILLERS) + lines[i]
    if rng.random() < noise.format_slip:
        answer = rng.choice(
            (f"answer {a + b}", f"####{a + b}", f"= {a + b}", None, f"#### {a + b}\n#### {a + b}")
        )
    if rng.random() < noise.excited:
        opener = rng.choice(EXCITED)
        if rng.random() < 0.5:
            lines[0] = opener + lines[0]
        elif answer is not None:
            answer = opener + answer
    return "\n".join(lines + ([answer] if answer is not None else []))
