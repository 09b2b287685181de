"""Make tests/backend/estimators/fixtures/official/progress_advantage.json from Progress Advantage's code.

    python scripts/official_fixtures/progress_advantage.py /path/to/progress-advantage

The argument is a git work tree of deeplearning-wisc/progress-advantage at the commit below, or, where no
clone can be had, a folder holding `pa/scoring.py` and `pa/aggregations.py` as stored at the cited commits;
such a folder is accepted only when both files have the SHA-256 below (the texts read at those commits),
and the fixture says which way the code was reached. `pa/aggregations.py` is the version of
`b1253bdd1a3a2de87fab823435bbeacffea19957`, its only stored version.

`per_step_progress_advantage(policy, reference, token_agg, beta)` runs unchanged on `StepCache`s built from
the inputs here: one trajectory is a list of messages, an action (assistant) message with its tokens'
policy and reference log-probs, a non-action (tool) message with none, as `LogprobScorer.score` leaves
them. The model forward pass of `LogprobScorer` is not run: the log-probs are the inputs.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import types

import common
import numpy as np

REPOSITORY = "deeplearning-wisc/progress-advantage"
COMMIT = "9284b4c0e05360e87cae85d51573f2c6768e8ba2"
FUNCTION = "pa/scoring.py per_step_progress_advantage with pa/aggregations.py aggregate_tokens"
FILE_SHA256 = {
    "pa/scoring.py": "c6cf35ecf03f51bbee247a7d9f6fa6c3614f88c3eefb9347f0cadfcb824285ac",
    "pa/aggregations.py": "bb0f4ec7788305d7032b0d35455658f12c01a2dc90f6e9c669b0192c5417c139",
}

# A trajectory: messages as ("assistant", logprobs, ref_logprobs) or ("tool", n_tokens); the fixture runs
# every token_agg with beta 1 and 0.5.
TRAJECTORIES = [
    [
        ("assistant", [-0.5, -1.25, -0.125], [-0.75, -1.0, -0.5]),
        ("tool", 2),
        ("assistant", [-2.0, -0.25], [-1.5, -0.5]),
    ],
    [
        ("assistant", [-0.1], [-0.3]),
        ("tool", 3),
        ("assistant", [-0.7, -0.2, -1.9, -0.05], [-0.6, -0.4, -1.2, -0.3]),
        ("tool", 1),
        ("assistant", [-3.0, -0.01], [-2.5, -0.02]),
    ],
    [("assistant", [-0.9, -0.4, -0.6, -0.2], [-0.9, -0.4, -0.6, -0.2])],
]
TOKEN_AGGS = ["mean", "sum", "last", "min", "max"]
BETAS = [1.0, 0.5]


def reach(checkout) -> tuple[str, str | None]:
    """The commit that ran and a note on how the code was reached."""
    is_git = (
        subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--is-inside-work-tree"], capture_output=True, text=True
        ).stdout.strip()
        == "true"
    )
    if is_git:
        return common.checkout_commit(checkout, COMMIT, "--any-commit" in sys.argv), None
    for name, digest in FILE_SHA256.items():
        actual = hashlib.sha256((checkout / name).read_bytes()).hexdigest()
        if actual != digest:
            raise SystemExit(f"{checkout / name}: SHA-256 {actual}, not the cited text's {digest}")
    return COMMIT, (
        "no git work tree: pa/scoring.py as stored at 9284b4c0e05360e87cae85d51573f2c6768e8ba2 and "
        "pa/aggregations.py as stored at b1253bdd1a3a2de87fab823435bbeacffea19957, checked by SHA-256"
    )


def load(checkout):
    package = types.ModuleType("pa")  # pa/__init__.py is not run: only the two files are needed
    package.__path__ = [str(checkout / "pa")]
    sys.modules["pa"] = package
    aggregations = types.ModuleType("pa.aggregations")
    common.load_file(checkout / "pa" / "aggregations.py", aggregations.__dict__)
    sys.modules["pa.aggregations"] = aggregations
    scoring = types.ModuleType("pa.scoring")
    sys.modules["pa.scoring"] = scoring  # dataclass() looks its module up
    return common.load_file(checkout / "pa" / "scoring.py", scoring.__dict__ | {"__name__": "pa.scoring"})


def caches(namespace, messages):
    step_cache = namespace["StepCache"]
    empty = np.zeros(0, dtype=np.float32)
    is_action = [m[0] == "assistant" for m in messages]
    policy = [np.asarray(m[1], dtype=np.float32) if m[0] == "assistant" else empty for m in messages]
    ref = [np.asarray(m[2], dtype=np.float32) if m[0] == "assistant" else empty for m in messages]
    return (
        step_cache(policy, [empty] * len(messages), is_action),
        step_cache(ref, [empty] * len(messages), is_action),
    )


def main() -> None:
    args = common.parse_args(__doc__, REPOSITORY, COMMIT)
    commit, note = reach(args.checkout)
    namespace = load(args.checkout)
    fixture = common.provenance(
        "progress_advantage.py", REPOSITORY, COMMIT, commit, FUNCTION, ("torch", "numpy", "transformers")
    )
    if note:
        fixture["commit_note"] = note
    fixture["cases"] = []
    for messages in TRAJECTORIES:
        policy, reference = caches(namespace, messages)
        for token_agg in TOKEN_AGGS:
            for beta in BETAS:
                fixture["cases"].append(
                    {
                        "messages": [list(m) for m in messages],
                        "token_agg": token_agg,
                        "beta": beta,
                        "per_step": namespace["per_step_progress_advantage"](
                            policy, reference, token_agg, beta
                        ),
                    }
                )
    common.write("progress_advantage", fixture, args.out)


if __name__ == "__main__":
    main()
