"""Make tests/backend/estimators/fixtures/official/turn_credit_prime_rl.json from prime-rl's turn credit.

    python scripts/official_fixtures/turn_credit_prime_rl.py /path/to/prime-rl   # work tree at COMMIT

`src/prime_rl/orchestrator/algo/turn_credit.py` is run as a file: its imports of the orchestrator (the
config class, `Algorithm`, `iter_trainable_branches`, the logger) are supplied by stand-ins, so
`TurnCreditAlgorithm.score_group` runs unchanged on rollouts that are plain objects. Each rollout here is
one branch of nodes, the response only (no prompt node): an assistant turn is a sampled node whose tokens
all train, a tool's answer a node that is not sampled and trains none. The stand-in
`iter_trainable_branches` yields that branch with the concatenated node masks, as prime-rl's does for a
trace that never forks. `assign_advantages` records what the rollout gets: a scalar (the level, on every
trained token) or the per-token stream.
"""

from __future__ import annotations

import asyncio
import sys
import types
from types import SimpleNamespace

import common

REPOSITORY = "PrimeIntellect-ai/prime-rl"
COMMIT = "510fde36c3472ce884a3523e8969da4f9c6f897d"
FUNCTION = "src/prime_rl/orchestrator/algo/turn_credit.py TurnCreditAlgorithm.score_group, one call per group"

# A rollout: its final reward, its turns as (role, tokens), and its turn_rewards (None: absent).
# The groups: prime-rl's own test cases (tests/unit/orchestrator/test_turn_credit.py) with tool turns between
# the assistant turns, then unscored (None) turns, uneven turn lengths, a rollout without turn_rewards beside
# shaped ones, and a group of three.
A, T = "assistant", "tool"
CASES = [
    {
        "gamma": 0.9,
        "beta": 0.0,
        "group": [
            (1.0, [(A, 2), (T, 1), (A, 2), (T, 1), (A, 2)], [0.0, 0.5, 1.0]),
            (0.0, [(A, 2), (T, 1), (A, 2), (T, 1), (A, 2)], [0.0, 0.2, 0.0]),
        ],
    },
    {
        "gamma": 0.9,
        "beta": 1.0,
        "group": [
            (1.0, [(A, 2), (T, 1), (A, 2), (T, 1), (A, 2)], [0.0, 1.0, 0.5]),
            (0.0, [(A, 2), (T, 1), (A, 2), (T, 1), (A, 2)], [0.5, 0.5, 0.5]),
        ],
    },
    {"gamma": 0.5, "beta": 1.0, "group": [(0.0, [(A, 2), (T, 1), (A, 2), (T, 1), (A, 2)], [0.0, 0.0, 1.0])]},
    {"gamma": 0.9, "beta": 1.0, "group": [(1.0, [(A, 3), (T, 2), (A, 3)], [0.0, 1.0])]},
    {
        "gamma": 0.9,
        "beta": 1.0,
        "group": [(1.0, [(A, 2), (T, 1), (A, 2)], [0.0, 1.0]), (1.0, [(A, 2), (T, 1), (A, 2)], [0.0, 0.0])],
    },
    {
        "gamma": 0.9,
        "beta": 1.0,
        "group": [
            (0.0, [(A, 2), (T, 1), (A, 2), (T, 1), (A, 2)], [1.0, 1.0, 1.0]),
            (0.0, [(A, 2), (T, 1), (A, 2), (T, 1), (A, 2)], [0.0, 0.0, 1.0]),
        ],
    },
    {
        "gamma": 1.0,
        "beta": 0.5,
        "group": [
            (1.0, [(A, 1), (T, 3), (A, 4), (T, 2), (A, 2), (T, 1), (A, 3)], [0.2, None, 0.7, 1.0]),
            (0.0, [(A, 5), (T, 1), (A, 1)], None),
            (0.5, [(A, 2), (T, 2), (A, 2), (T, 2), (A, 2)], [None, 0.4, -0.2]),
        ],
    },
    {
        "gamma": 0.0,
        "beta": 2.0,
        "group": [
            (0.25, [(A, 3), (T, 1), (A, 2), (T, 1), (A, 1)], [0.0, 0.3, 0.9]),
            (0.75, [(A, 2), (T, 1), (A, 2), (T, 1), (A, 2)], [0.1, 0.1, 0.1]),
        ],
    },
]


def load_algorithm(checkout) -> type:
    class Algorithm:
        def __init__(self, config, policy_pool):
            self.config = config
            self.policy_pool = policy_pool

    def iter_trainable_branches(rollout):
        # prime-rl's, for a trace of one branch that never forks: the branch and its nodes' masks
        for branch in rollout.branches:
            mask = [m for node in branch.nodes for m in node.mask]
            if any(mask):
                yield branch, mask

    logger = SimpleNamespace(warning=lambda message: print("warning:", message))
    trajectories = SimpleNamespace(iter_trainable_branches=iter_trainable_branches)
    stubs = {
        "prime_rl.configs.algorithm": SimpleNamespace(TurnCreditAlgoConfig=object),
        "prime_rl.orchestrator.algo.base": SimpleNamespace(Algorithm=Algorithm),
        "prime_rl.orchestrator.trajectories": trajectories,
        "prime_rl.utils.logger": SimpleNamespace(get_logger=lambda: logger),
    }
    for name in (
        "prime_rl",
        "prime_rl.configs",
        "prime_rl.orchestrator",
        "prime_rl.orchestrator.algo",
        "prime_rl.utils",
    ):
        stubs[name] = types.ModuleType(name)
    sys.modules.update(stubs)
    path = checkout / "src" / "prime_rl" / "orchestrator" / "algo" / "turn_credit.py"
    return common.load_file(path, {"__name__": "turn_credit"})["TurnCreditAlgorithm"]


def rollout(reward: float, turns: list, turn_rewards) -> SimpleNamespace:
    nodes = [SimpleNamespace(sampled=role == A, token_ids=[0] * n, mask=[role == A] * n) for role, n in turns]
    out = SimpleNamespace(
        reward=reward,
        info={} if turn_rewards is None else {"turn_rewards": list(turn_rewards)},
        num_turns=sum(node.sampled for node in nodes),
        env_name="fixture",
        nodes=nodes,
        branches=[SimpleNamespace(nodes=nodes)],
        advantages=None,
    )
    out.assign_advantages = lambda value: setattr(out, "advantages", value)
    return out


def main() -> None:
    args = common.parse_args(__doc__, REPOSITORY, COMMIT)
    commit = common.checkout_commit(args.checkout, COMMIT, args.any_commit)
    algorithm_cls = load_algorithm(args.checkout)
    fixture = common.provenance("turn_credit_prime_rl.py", REPOSITORY, COMMIT, commit, FUNCTION, ("torch",))
    fixture["cases"] = []
    for case in CASES:
        group = [rollout(*member) for member in case["group"]]
        config = SimpleNamespace(gamma=case["gamma"], beta=case["beta"], length_penalty=None)
        asyncio.run(algorithm_cls(config, policy_pool=None).score_group(group))
        fixture["cases"].append(
            {
                "gamma": case["gamma"],
                "beta": case["beta"],
                "rollouts": [
                    {
                        "reward": reward,
                        "turns": [[role, n] for role, n in turns],
                        "turn_rewards": scores,
                        "assigned": r.advantages,
                    }
                    for (reward, turns, scores), r in zip(case["group"], group, strict=True)
                ],
            }
        )
    common.write("turn_credit_prime_rl", fixture, args.out)


if __name__ == "__main__":
    main()
