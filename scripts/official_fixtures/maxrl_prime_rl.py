"""Make tests/backend/estimators/fixtures/official/maxrl_prime_rl.json from prime-rl's `max_rl` algorithm.

    python scripts/official_fixtures/maxrl_prime_rl.py /path/to/prime-rl   # a work tree at the commit below

A cross-check of MaxRL in a second codebase. `src/prime_rl/orchestrator/algo/max_rl.py` is run as a file:
its imports of the orchestrator (verifiers' `Episode` types, `Algorithm`, `iter_trainable_traces`,
`assign_advantages`) are supplied by stand-ins, so `MaxRLAlgorithm.score_group` runs unchanged on episodes
that are plain objects with a reward, every trace trainable and non-empty (the real `iter_trainable_traces`
leaves out traces with an error or without a sampled token; none here has either). The stand-in
`assign_advantages` records the scalar each trace gets.
"""

from __future__ import annotations

import asyncio
import sys
import types
from types import SimpleNamespace

import common

REPOSITORY = "PrimeIntellect-ai/prime-rl"
COMMIT = "559b44772e471d1538537b8805cc77f3824a5e64"
FUNCTION = "src/prime_rl/orchestrator/algo/max_rl.py MaxRLAlgorithm.score_group, one call per group"

# groups of sequence rewards: pass rates 1/4, 0, 1, 5/8, a singleton, fractional and negative rewards
GROUPS = [
    [1.0, 0.0, 0.0, 0.0],
    [0.0, 0.0],
    [1.0, 1.0],
    [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0],
    [1.0],
    [0.25, 0.5, 1.5],
    [-1.0, 0.0, -0.5],
    [-1.0, 1.0],
]


def load_algorithm(checkout) -> type:
    given: dict[str, list[float]] = {}

    def iter_trainable_traces(episodes):
        for episode in episodes:
            for trace in episode.traces:
                yield episode, trace

    def assign_advantages(trace, value):
        given[trace.id] = value

    class Algorithm:
        def __init__(self, config, policy_pool):
            self.policy_pool = policy_pool

    stubs = {
        "verifiers": types.ModuleType("verifiers"),
        "verifiers.v1": types.ModuleType("verifiers.v1"),
        "prime_rl.orchestrator.algo.base": types.SimpleNamespace(
            Algorithm=Algorithm, iter_trainable_traces=iter_trainable_traces
        ),
        "prime_rl.orchestrator.algo.routing": types.SimpleNamespace(assign_advantages=assign_advantages),
    }
    stubs["verifiers.v1"].Episode = object
    stubs["verifiers"].v1 = stubs["verifiers.v1"]
    for name in ("prime_rl", "prime_rl.orchestrator", "prime_rl.orchestrator.algo"):
        stubs[name] = types.ModuleType(name)
    sys.modules.update(stubs)
    namespace = common.load_file(
        checkout / "src" / "prime_rl" / "orchestrator" / "algo" / "max_rl.py", {"__name__": "max_rl"}
    )
    return namespace["MaxRLAlgorithm"], given


def main() -> None:
    args = common.parse_args(__doc__, REPOSITORY, COMMIT)
    commit = common.checkout_commit(args.checkout, COMMIT, args.any_commit)
    algorithm_cls, given = load_algorithm(args.checkout)
    fixture = common.provenance("maxrl_prime_rl.py", REPOSITORY, COMMIT, commit, FUNCTION, ("torch",))
    fixture["cases"] = []
    for g, rewards in enumerate(GROUPS):
        episodes = [
            SimpleNamespace(traces=[SimpleNamespace(id=f"{g}-{i}", reward=r)]) for i, r in enumerate(rewards)
        ]
        asyncio.run(algorithm_cls(None, policy_pool=None).score_group(episodes))
        fixture["cases"].append(
            {"rewards": rewards, "advantages": [given[f"{g}-{i}"] for i in range(len(rewards))]}
        )
    common.write("maxrl_prime_rl", fixture, args.out)


if __name__ == "__main__":
    main()
