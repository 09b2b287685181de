"""Answer extraction and matching for integer answers: `#### n`, `\\boxed{n}`, or the last integer.

Extraction prefers the most explicit marker: the last `#### n` line, else the last `\\boxed{...}`, else
(only when `fallback_last_integer`) the last integer anywhere in the text. Integers may carry a sign,
thousands separators (`1,234`) and a zero fractional part (`12.0`); anything else is not an integer
answer and never matches.
"""

from __future__ import annotations

import re

_INT = r"[-+−]?\d{1,3}(?:,\d{3})+(?![\d,])|[-+−]?\d+"
HASH_ANSWER = re.compile(r"####[ \t]*(" + _INT + r")(?:\.0+)?(?![\d.])")
BOXED = re.compile(r"\\boxed\s*\{")
LAST_INTEGER = re.compile(r"(?<![\w.])(" + _INT + r")(?:\.0+)?(?!\w|\.\d)")


def parse_int(text: str | int | float | None) -> int | None:
    """The integer a string denotes (`-1,234`, `+7`, `12.0`, `$5`), or None when it is not one."""
    if text is None or isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text
    if isinstance(text, float):
        return int(text) if text.is_integer() else None
    s = str(text).strip().replace("−", "-").lstrip("$").strip()
    m = re.fullmatch(r"([-+]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.0+)?", s)
    if not m:
        return None
    return int(m.group(1) + m.group(2).replace(",", ""))


def boxed_contents(text: str) -> list[str]:
    """Contents of every `\\boxed{...}`, braces balanced."""
    found = []
    for m in BOXED.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found.append(text[m.end() : i - 1])
    return found


def extract_answer(text: str, fallback_last_integer: bool = True) -> int | None:
    """The integer answer of a response, or None."""
    marked = HASH_ANSWER.findall(text)
    if marked:
        return parse_int(marked[-1])
    if "####" in text:
        return None  # a marker with no integer after it is a wrong answer, not a fallback case
    boxed = boxed_contents(text)
    if boxed:
        return parse_int(boxed[-1])
    if fallback_last_integer:
        found = LAST_INTEGER.findall(text)
        if found:
            return parse_int(found[-1])
    return None


def answer_match(response: str, ground_truth, fallback_last_integer: bool = True) -> float:
    """1.0 when the extracted integer equals the ground truth, else 0.0."""
    truth = parse_int(ground_truth if not isinstance(ground_truth, str) else ground_truth.strip())
    if truth is None and isinstance(ground_truth, str):
        truth = extract_answer(ground_truth, fallback_last_integer=True)
    if truth is None:
        return 0.0
    got = extract_answer(response, fallback_last_integer=fallback_last_integer)
    return 1.0 if got is not None and got == truth else 0.0
