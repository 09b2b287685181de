"""How an estimator explains its number: the derivation of A_t from its terms
(`backend.views.explain.terms_of`), with the numbers, one formula per line, registered with the estimator
(`register(..., explain=fn)`).

A derivation is `fn(v: Terms) -> list[str]`; `Terms` reads the terms at one token. The steps shared by
several families live here (Z from the outcome, Z broadcast, a base advantage scaled per token, and the
last resort: A_t with every per-token term); each family's own steps live beside its methods. A step gives
no lines when its terms are not there, so `first_of` tries a method's steps in order. Every registered
estimator has a derivation (tests/test_architecture.py checks it).
"""

from __future__ import annotations


class Terms:
    """The terms of one response (`backend.views.explain.terms_of`) read at token `t`.

    seq: name -> float or None (Z, R, group statistics); tok: name -> (L,) floats or None; cfg: the
    config's fields; notes: name -> text."""

    def __init__(self, terms: dict, t: int) -> None:
        self.terms, self.t = terms, t
        self.seq, self.tok, self.cfg = terms["sequence"], terms["tokens"], terms["config"]
        self.notes = terms["notes"]

    def at(self, name: str, i: int | None = None) -> float | None:
        """Token term `name` at `i` (default: t); None when absent, out of range or not finite."""
        vals = self.tok.get(name)
        i = self.t if i is None else i
        if vals is None or not 0 <= i < len(vals):
            return None
        return vals[i]

    @property
    def A(self) -> float | None:
        return self.at("advantage")


def first_of(v: Terms, *steps) -> list[str]:
    """The lines of the first step that has its terms at t (each step gives no lines without them)."""
    for step in steps:
        lines = step(v)
        if lines:
            return lines
    return []


def z_from_outcome(v: Terms, outcome: str | None = None) -> list[str]:
    """Z from the response's outcome R and its group (the estimator's `outcome`, default from the config)."""
    seq, cfg = v.seq, v.cfg
    if not ("R" in seq and "Z" in seq):
        return []
    if outcome is None:
        outcome = cfg.get("outcome", "grpo" if cfg.get("norm_by_std", True) else "dr_grpo")
    R, mean, std, Z = seq["R"], seq["group_mean"], seq["group_std"], seq["Z"]
    if None in (R, mean, std, Z):
        return ["R: no score on this channel (left out of the group; advantage 0)"]
    if outcome == "maxrl":
        eps = seq.get("epsilon", 0.0) or 0.0
        if mean <= 0 and cfg.get("nonpositive_mean") == "zero":
            return [
                f"pass rate mean_G = {mean:.4g} ≤ 0: no success in the group, Z = 0"
                f"   (G = {seq['group_n']:.0f})"
            ]
        return [
            f"Z = (R − mean_G) / (mean_G + ε) = ({R:.4g} − {mean:.4g}) / ({mean:.4g} + "
            f"{eps:.0e}) = {Z:.4g}   (MaxRL: divided by the pass rate, G = {seq['group_n']:.0f})"
        ]
    if outcome == "grpo":
        eps = seq.get("epsilon", 0.0) or 0.0
        return [
            f"Z = (R − mean_G) / (std_G + ε) = ({R:.4g} − {mean:.4g}) / ({std:.4g} + {eps:.0e})"
            f" = {Z:.4g}   (G = {seq['group_n']:.0f})"
        ]
    n = seq["group_n"]
    if outcome == "dr_grpo":
        return [f"Z = R − mean_G = {R:.4g} − {mean:.4g} = {Z:.4g}   (Dr. GRPO: no std, G = {n:.0f})"]
    if outcome == "rloo" and n > 1:
        return [
            f"Z = R − mean of the other {n - 1:.0f} = (R − mean_G) · G / (G − 1) = ({R:.4g} − {mean:.4g}) × "
            f"{n:.0f} / {n - 1:.0f} = {Z:.4g}   (RLOO)"
        ]
    if outcome == "rloo":
        return [f"Z = R = {R:.4g}   (RLOO: alone in its group, no other response to subtract)"]
    return [f"Z ({outcome}) from R = {R:.4g}, group mean {mean:.4g} (G = {n:.0f}) = {Z:.4g}"]


def z_then(*steps):
    """The derivation of a method built on the outcome Z: Z from the outcome, then the lines of the first of
    `steps` that has its terms at t, else Z broadcast (register it as `explain=z_then(...)`)."""

    def derivation(v: Terms) -> list[str]:
        return [*z_from_outcome(v), *first_of(v, *steps, broadcast)]

    return derivation


def broadcast(v: Terms) -> list[str]:
    """A_t = Z on every token (outcome estimators; any method whose A_t equals Z at t)."""
    Z, A = v.seq.get("Z"), v.A
    if Z is not None and A is not None and abs(A - Z) < 1e-6:
        return [f"A_t = Z = {A:.4g} (broadcast to every token)"]
    return []


def scaled_base(v: Terms) -> list[str]:
    """A_t = f_t · base_t: a base estimator's advantage scaled or masked per token (the modifiers)."""
    base, A = v.at("base"), v.A
    if base is None:
        return []
    factor = A / base if base else float("nan")
    flags = [n for n in ("boosted", "pivots", "mask") if v.at(n)]
    note = f"   ({', '.join(flags)} at t)" if flags else ""
    if base:
        return [f"A_t = f_t · base_t = {factor:.4g} × {base:.4g} = {A:.4g}{note}"]
    return [f"base_t = 0, so A_t = {A:.4g}{note}"]


def every_term(v: Terms) -> list[str]:
    """No formula: the number itself, with every per-token term at t (the last resort of every method)."""
    if v.A is None:
        return []
    shown = ", ".join(f"{k}_t = {v.at(k):.4g}" for k in v.tok if k != "advantage" and v.at(k) is not None)
    return [f"A_t = {v.A:.4g}" + (f"   ({shown})" if shown else "")]
