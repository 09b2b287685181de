"""Credit out of proportion to the text (a token class's), as SQL over a `credit_summary` row aliased `c`:
`excess_<class>` = the class's share of |A| − its share of the response's tokens (they sum to 0 over the
classes of a rollout with credit), and its signed parts, which sum to it:
`excess_pos_<class>` = (positive credit on the class − all positive credit × the token share) / Σ|A|,
`excess_neg_<class>` the same with the negative credit. NULL where the rollout has no credit."""

from __future__ import annotations

_SIGNED = {"pos": "class_pos", "neg": "class_neg"}


def excess_sql(index: int, sign: str = "") -> str:
    """The expression of the class at 1-based `index` of the summary's lists; sign "", "pos" or "neg"."""
    i = int(index)
    tokens = f"c.class_tokens[{i}] / nullif(list_sum(c.class_tokens), 0)"
    if not sign:
        return f"(c.class_abs[{i}] / nullif(c.abs_total, 0) - {tokens})"
    column = _SIGNED[sign]
    return f"((c.{column}[{i}] - list_sum(c.{column}) * {tokens}) / nullif(c.abs_total, 0))"
