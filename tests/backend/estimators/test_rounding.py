"""Decisions that must not depend on float rounding.

KTAE's Fisher strength F = exp(-2p) is 0 exactly when p = 1, and p = 1 is decided by counting tables.

The official code tests `p != 1.0` on a float32 sum, which on some CPUs falls just under 1 for tables whose
exact p is 1 (503 of the 640 such tables for groups up to 8 + 8 on an AMD EPYC), so F jumped from 0 to
e^-2 there. Here every table with both margins up to 8 is checked against exact rational arithmetic, in the
vectorized kernel and in its loop twin: the same decision on every CPU. And a group whose scores are all
equal has Z = 0 exactly under every outcome, so that sign rules (A > 0) never read a rounding residue.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from backend.estimators.functional import outcome_scores
from backend.estimators.methods.learned_ktae import fisher_p_values
from backend.estimators.twins.learned import _fisher_loop
from backend.estimators.twins.loops import outcome_loop


def exact_p(a: int, b: int, c: int, d: int) -> Fraction:
    """The two-sided p of [[a, b], [c, d]] with exact rationals (the definition, nothing shared)."""
    R1, C1, n = a + b, a + c, a + b + c + d

    def prob(k: int) -> Fraction:
        return Fraction(math.comb(C1, k) * math.comb(n - C1, R1 - k), math.comb(n, R1))

    observed = prob(a)
    return sum(
        (prob(k) for k in range(max(0, R1 + C1 - n), min(R1, C1) + 1) if prob(k) <= observed), Fraction(0)
    )


def all_tables(max_group: int = 8):
    """Every [[a, b], [c, d]] with a + c correct and b + d incorrect rollouts, both in 1..max_group."""
    for n_correct in range(1, max_group + 1):
        for n_wrong in range(1, max_group + 1):
            for a in range(n_correct + 1):
                for b in range(n_wrong + 1):
                    yield a, b, n_correct - a, n_wrong - b


def test_p_is_one_exactly_where_the_exact_p_is_one():
    tables = list(all_tables())
    t = torch.tensor(tables, dtype=torch.float32)
    p, p_is_one = fisher_p_values(t[:, 0], t[:, 1], t[:, 2], t[:, 3])
    exact = [exact_p(*tab) for tab in tables]
    expected_one = torch.tensor([e == 1 for e in exact])
    assert int(expected_one.sum()) > 500  # the case the issue found: hundreds of tables with p = 1
    assert torch.equal(p_is_one, expected_one)
    torch.testing.assert_close(
        p.double(), torch.tensor([float(e) for e in exact], dtype=torch.float64), atol=1e-6, rtol=0
    )
    for tab, e in zip(tables, exact, strict=True):
        loop_p, loop_one = _fisher_loop(*tab)
        assert loop_one == (e == 1), tab
        assert abs(loop_p - float(e)) < 1e-12, tab


def test_known_tables():
    # [[1, 1], [1, 1]]: the observed table is the mode (1/6, 4/6, 1/6), so p = 1 and F = 0.
    # [[0, 2], [2, 0]]: ties with [[2, 0], [0, 2]] (1/6 each): both count, p = 1/3.
    t = torch.tensor([[1, 1, 1, 1], [0, 2, 2, 0], [3, 0, 0, 3]], dtype=torch.float32)
    p, p_is_one = fisher_p_values(t[:, 0], t[:, 1], t[:, 2], t[:, 3])
    assert p_is_one.tolist() == [True, False, False]
    torch.testing.assert_close(p, torch.tensor([1.0, 1 / 3, 0.1]), atol=1e-6, rtol=0)


@pytest.mark.parametrize("outcome", ["grpo", "dr_grpo", "rloo"])
def test_a_flat_group_gives_z_exactly_zero(outcome):
    # in float32, seven 0.7s summed and divided by 7 give 0.7 - 6e-8: R - mean was a tiny positive number
    # (dr_grpo, rloo) whose sign later rules (Z > 0) read
    scores = torch.tensor([0.1, 0.1, 0.1, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7])
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1, 1, 1])
    z = outcome_scores(scores, groups, outcome)
    assert torch.equal(z, torch.zeros_like(z))
    assert outcome_loop(scores.tolist(), groups.tolist(), outcome) == [0.0] * 10
