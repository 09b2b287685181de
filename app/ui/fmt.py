"""Numbers and model text for people and for Plotly.

Model text is untrusted. Plotly renders a subset of HTML in text and hover labels, so every string that
came from a model or a file goes through `safe()` before it reaches a figure; numbers go through `nice()`
(no "-0.000", "–" for missing) or `percent()`.
"""

from __future__ import annotations

import html
import math
import re


def safe(text: str) -> str:
    """Escape `<`, `>`, `&`, quotes for Plotly's HTML-ish text rendering.

    Plotly decodes numeric entities and a few named ones, but not `&quot;`, so `"` becomes `&#34;`
    (else a hover label shows `&quot;` where the model wrote a quote)."""
    return html.escape(str(text), quote=True).replace("&quot;", "&#34;")


def shown_token(text: str) -> str:
    """A token with its whitespace made visible (newline ⏎, tab ⇥, space ␣), not escaped."""
    return str(text).replace("\n", "⏎").replace("\t", "⇥").replace(" ", "␣")


def visible_token(text: str, width: int = 3) -> str:
    """A token as it can be read in a cell: whitespace made visible, cut to `width` characters, escaped."""
    shown = shown_token(text)
    if len(shown) > width:
        shown = shown[: width - 1] + "…"
    return safe(shown)


def _finite(v) -> float | None:
    """`v` as a float, or None when it is missing, not a number, NaN or infinite (shown as '–')."""
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def nice(v, digits: int = 3, signed: bool = True) -> str:
    """A number for people: '–' for missing/NaN, no '-0.000', `digits` decimals."""
    v = _finite(v)
    if v is None:
        return "–"
    text = f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"
    if float(text) == 0:
        return f"{0:.{digits}f}"
    return text


def percent(v, digits: int = 0) -> str:
    v = _finite(v)
    return "–" if v is None else f"{v:.{digits}%}"


def significant(v, digits: int = 2, signed: bool = True) -> str:
    """A number with `digits` significant digits, however small or large (a colour bar's ends: a 1e-4 range
    reads "+1.0e-4", not "0.00"); "0" for zero, "–" for missing/NaN."""
    v = _finite(v)
    if v is None:
        return "–"
    if v == 0:
        return "0"
    sign = "+" if signed else ""
    magnitude = math.floor(math.log10(abs(v)))
    if -2 <= magnitude < 4:  # plain decimals, as many as `digits` significant digits need
        return f"{v:{sign}.{max(digits - 1 - magnitude, 0)}f}"
    mantissa, exponent = f"{v:{sign}.{digits - 1}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


# A sentence ends at ". " before a capital, after a word of 3+ letters: not "Dr. GRPO", "Eq. 5", "et al. ".
_SENTENCE_END = re.compile(r"(?<=[A-Za-z0-9)\]]{3})\.\s+(?=[A-Z(])")


def first_sentence(text: str) -> str:
    """The first sentence of `text` (whitespace collapsed), without its full stop."""
    text = " ".join(str(text).split())
    return _SENTENCE_END.split(text, maxsplit=1)[0].rstrip(".")


def clip_words(text: str, width: int) -> str:
    """`text` in at most `width` characters, cut at a word boundary with "…" (never mid-word; a first word
    longer than `width` is the only thing cut inside)."""
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    if text[width - 1] != " " and " " in cut:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip(" ,;:(—-") + "…"
