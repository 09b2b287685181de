"""Make tests/backend/estimators/fixtures/official/ktae.json from the official KTAE code.

    python scripts/official_fixtures/ktae.py /path/to/KTAE   # a checkout of xiaolizh1/KTAE at the commit

Runs `compute_ktae_outcome_advantage_and_keytokens` (verl/trainer/ppo/core_algos.py), which builds
`ComputeKeyTokens` (verl/workers/actor/compute_key_tokens.py) with alpha = beta_ig = gamma_tf = top = 1,
on the groups written below. `verl/workers/actor/__init__.py` is not run: it imports dp_actor, which needs
flash_attn (a CUDA library); compute_key_tokens.py itself imports as it is.

Fisher p = 1. The official code tests `fisher_pvalue != 1.0` on a float32 sum, and whether that
sum is exactly 1.0 for a table whose exact p is 1 depends on the CPU's rounding (so do ties between equal
hypergeometric probabilities, `p_k <= p_obs`). The fixture's `advantages` therefore come from the official
code with one thing decided exactly: each p that `fisher_exact_test` returns is compared with the exact
two-sided p (rational arithmetic, below); where they differ by more than 1e-6 (a tie decided the other
way) or the exact p is 1, the exact value is passed on instead (1.0 exactly when p = 1). Everything
else is the official code as it runs. Each case also records every table with its official float p, its
exact p and whether it was replaced, and `advantages_as_run`, the unchanged official output on the CPU
named in the fixture, so the effect of the rounding can be read off the file.
"""

from __future__ import annotations

import math
from fractions import Fraction

import common
import numpy as np
import torch

REPOSITORY = "xiaolizh1/KTAE"
COMMIT = "ea9fb77f366216d754e2368653911724e73a7376"
FUNCTION = (
    "verl/trainer/ppo/core_algos.py compute_ktae_outcome_advantage_and_keytokens + "
    "verl/workers/actor/compute_key_tokens.py ComputeKeyTokens (alpha=beta_ig=gamma_tf=top=1)"
)
EOS = 151643  # Qwen's <|endoftext|>: the official code scores it 0
PAD = 0  # right padding, outside the mask

# (token_ids, group_id, score) per response; a response is correct when its score is > 0.
CASES = [
    [
        ([1, 5, 1, 5, 2, EOS], 0, 1),
        ([1, EOS], 0, 0),
        ([6, 4, 4, 4, 6], 0, 1),
        ([6, EOS], 0, 0),
        ([EOS], 0, 0),
        ([2, 1, 2, 1, EOS], 0, 1),
        ([1, 1, 2, 3, 6, 4, EOS], 1, 1),
        ([6, 6, 2, 1], 1, 1),
        ([1, 1, EOS], 1, 0),
        ([3, 5, 6, 6, 6], 1, 0.5),
        ([EOS], 1, 0),
        ([4, 6, 3, 3, 3, EOS], 1, 0),
    ],
    [
        ([3, 3, 1], 0, 1),
        ([1, 1, 5, 4, 1], 0, 0),
        ([4, 3, 5, 4, 5, EOS], 0, 0),
        ([EOS], 0, 0),
        ([1, 5, 4, EOS], 1, 1),
        ([5, 4, 1, 3, 4, EOS], 1, 1),
        ([1, EOS], 1, 1),
        ([2, 3, 2], 1, 1),
        ([1, 1, 1, EOS], 2, 0),
        ([3, 4, 3, 3, 6, EOS], 2, 1),
        ([2, 6, 5, EOS], 2, 0),
        ([4, 2, 5, 1, EOS], 2, 1),
        ([6, 4, 4, 2, 6, 6, EOS], 2, 1),
    ],
    # Tables chosen for the exact decisions: 2 + 2 rollouts give [[1, 1], [1, 1]] (p = 1 exactly) for
    # ids 8 and 9 and [[2, 2], [0, 0]] for EOS, and [[2, 0], [0, 2]] for id 7 (a tie with [[0, 2], [2, 0]]:
    # p = 1/3); 3 + 3 rollouts give [[2, 2], [1, 1]] (p = 1) for id 5 and [[3, 0], [0, 3]] (p = 0.1).
    [
        ([7, 8, EOS], 0, 1),
        ([7, 9, EOS], 0, 1),
        ([8, EOS], 0, 0),
        ([9, 9, EOS], 0, 0),
        ([4, 5, 6], 1, 1),
        ([4, 5], 1, 1),
        ([4, 6, 6], 1, 1),
        ([5, 6], 1, 0),
        ([5, 2], 1, 0),
        ([2, 2], 1, 0),
    ],
]


def exact_p(a: int, b: int, c: int, d: int) -> Fraction:
    """The two-sided Fisher p of [[a, b], [c, d]] as the official code defines it (the sum of the
    probabilities of the tables with these margins that are no more likely than the observed one), in
    exact rationals."""
    R1, C1, n = a + b, a + c, a + b + c + d

    def prob(k: int) -> Fraction:
        return Fraction(math.comb(C1, k) * math.comb(n - C1, R1 - k), math.comb(n, R1))

    observed = prob(a)
    support = range(max(0, R1 + C1 - n), min(R1, C1) + 1)
    return sum((prob(k) for k in support if prob(k) <= observed), Fraction(0))


def exactly_decided(official_fisher, tables_seen: list):
    """The official fisher_exact_test, its result replaced by the exact p where the float one crossed a
    decision (p = 1, or a tie); each non-empty table is appended to `tables_seen`."""

    def fisher_exact_test(input_tensor: torch.Tensor) -> torch.Tensor:
        p = official_fisher(input_tensor)
        decided = p.clone()
        for row in (input_tensor.sum(dim=1) > 0).nonzero().flatten().tolist():
            a, b, c, d = (int(x) for x in input_tensor[row].tolist())
            exact = exact_p(a, b, c, d)
            if exact == 1 or abs(float(p[row]) - float(exact)) > 1e-6:
                decided[row] = float(exact)
            tables_seen.append(
                {
                    "token_id": row,
                    "table": [a, b, c, d],
                    "p_official": float(p[row]),
                    "p_exact": f"{exact.numerator}/{exact.denominator}",
                    "replaced": bool(decided[row] != p[row]),
                }
            )
        return decided

    return fisher_exact_test


def run_official(core_algos, records: list) -> torch.Tensor:
    """The official advantages (B, T) float32 of one batch (T = the longest response)."""
    T = max(len(ids) for ids, _, _ in records)
    responses = torch.full((len(records), T), PAD, dtype=torch.long)
    eos_mask = torch.zeros(len(records), T)
    token_level_rewards = torch.zeros(len(records), T)
    for i, (ids, _, score) in enumerate(records):
        responses[i, : len(ids)] = torch.tensor(ids)
        eos_mask[i, : len(ids)] = 1.0
        token_level_rewards[i, len(ids) - 1] = score
    index = np.array([str(group) for _, group, _ in records], dtype=object)  # verl's uid strings
    advantages, _ = core_algos.compute_ktae_outcome_advantage_and_keytokens(
        token_level_rewards, responses, eos_mask, index
    )
    return advantages


def main() -> None:
    args = common.parse_args(__doc__, REPOSITORY, COMMIT)
    commit = common.checkout_commit(args.checkout, COMMIT, args.any_commit)
    common.use_checkout(args.checkout, skip_init=("verl.workers.actor",))
    from verl.trainer.ppo import core_algos  # noqa: PLC0415 - from the checkout, after use_checkout
    from verl.workers.actor import compute_key_tokens  # noqa: PLC0415 - idem

    official_fisher = compute_key_tokens.fisher_exact_test
    cases = []
    for records in CASES:
        compute_key_tokens.fisher_exact_test = official_fisher
        as_run = run_official(core_algos, records)
        tables: list = []
        compute_key_tokens.fisher_exact_test = exactly_decided(official_fisher, tables)
        decided = run_official(core_algos, records)
        cases.append(
            {
                "records": [
                    {"token_ids": ids, "group_id": group, "rollout_id": i, "scores": {"task": score}}
                    for i, (ids, group, score) in enumerate(records)
                ],
                "advantages": decided.tolist(),
                "advantages_as_run": as_run.tolist(),
                "fisher_tables": tables,
            }
        )
        changed = sum(t["replaced"] for t in tables)
        print(
            f"case {len(cases) - 1}: {len(tables)} tables, {changed} p replaced by the exact value, "
            f"largest change of A {float((decided - as_run).abs().max()):.6f}"
        )
    fixture = common.provenance(
        "ktae.py", REPOSITORY, COMMIT, commit, FUNCTION, ("torch", "numpy", "transformers", "tensordict")
    )
    fixture["fisher_p"] = (
        "advantages: the official code with each Fisher p replaced by the exact one "
        "where the exact p is 1 or the float p differs by more than 1e-6 (a tie decided "
        "the other way); advantages_as_run: the official code unchanged on the cpu above"
    )
    fixture["cases"] = cases
    common.write("ktae", fixture, args.out)


if __name__ == "__main__":
    main()
