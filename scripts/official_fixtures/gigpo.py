"""Make tests/backend/estimators/fixtures/official/gigpo.json from verl-agent's GiGPO.

    python scripts/official_fixtures/gigpo.py /path/to/verl-agent   # a work tree at the commit below

GiGPO's code is langfengQ/verl-agent `gigpo/core_gigpo.py`. That repository has no snapshot here; its fork
cq-dong/verl-agent has upstream's history, and the commit below is upstream's own (Lang Feng, "Add
search-r1 experiments ... & similarity-based GiGPO (#159)", 2025-09-03), the last upstream change to the
file in that fork. A sparse checkout of `gigpo/` is enough. The file is run as a file with a stand-in for
its one import of verl (`DataProto`, a type it only names).

As verl-agent's trainer calls it (`verl/trainer/ppo/ray_trainer.py` at that commit): one row per step (an
assistant turn) of each trajectory; `step_rewards` from `compute_step_discounted_returns` with γ over the
steps' rewards; `token_level_rewards` holding the episode reward on each step row's last token (the episode
reward manager, `agent_system/reward_manager/episode.py`); `index` the group, `traj_index` the trajectory,
`anchor_obs` the observation the step acts on. The inputs follow the mapping of our `gigpo` estimator: a
trajectory's reward is its final step's (earlier steps 0), the first step's observation is the prompt.
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import common
import numpy as np
import torch

REPOSITORY = "langfengQ/verl-agent (read in the fork cq-dong/verl-agent)"
COMMIT = "29e3e8b3e3412aff53b1e4a461dac77a8eec19bd"
FUNCTION = "gigpo/core_gigpo.py compute_gigpo_outcome_advantage with compute_step_discounted_returns"

# A group: trajectories as (episode reward, [(observation, tokens) per step]); every case runs both modes.
CASES = [
    {
        "gamma": 0.95,
        "step_advantage_w": 1.0,
        "group": [
            (1.0, [("prompt", 2), ("a", 3), ("b", 2)]),
            (0.0, [("prompt", 3), ("a", 2)]),
            (1.0, [("prompt", 2), ("c", 2)]),
            (0.0, [("prompt", 1), ("a", 2), ("a", 2), ("d", 1)]),
        ],
    },
    {
        "gamma": 1.0,
        "step_advantage_w": 0.5,
        "group": [(1.0, [("prompt", 2), ("a", 2)]), (1.0, [("prompt", 2), ("b", 2)])],
    },
    {"gamma": 0.9, "step_advantage_w": 2.0, "group": [(0.5, [("prompt", 3), ("a", 1), ("a", 2)])]},
    {
        "gamma": 0.5,
        "step_advantage_w": 1.0,
        "group": [
            (0.25, [("prompt", 2)]),
            (-1.0, [("prompt", 1), ("x", 2), ("y", 3)]),
            (0.75, [("prompt", 2), ("y", 2)]),
        ],
    },
]
MODES = ["mean_norm", "mean_std_norm"]


def load(checkout) -> dict:
    verl = types.ModuleType("verl")
    verl.DataProto = object
    sys.modules["verl"] = verl
    return common.load_file(checkout / "gigpo" / "core_gigpo.py", {"__name__": "core_gigpo"})


def rows(group: list) -> dict:
    """The group's steps as verl-agent's batch rows."""
    out = {"traj": [], "obs": [], "rewards": [], "tokens": [], "episode": []}
    for i, (reward, steps) in enumerate(group):
        for k, (obs, n) in enumerate(steps):
            out["traj"].append(f"t{i}")
            out["obs"].append(obs)
            out["rewards"].append(reward if k == len(steps) - 1 else 0.0)
            out["tokens"].append(n)
            out["episode"].append(reward)
    return out


def main() -> None:
    args = common.parse_args(__doc__, REPOSITORY, COMMIT)
    commit = common.checkout_commit(args.checkout, COMMIT, args.any_commit)
    gigpo = load(args.checkout)
    fixture = common.provenance("gigpo.py", REPOSITORY, COMMIT, commit, FUNCTION, ("torch", "numpy"))
    fixture["upstream"] = "https://github.com/langfengQ/verl-agent"
    fixture["fork_read"] = "https://github.com/cq-dong/verl-agent"
    fixture["cases"] = []
    for case in CASES:
        r = rows(case["group"])
        n, width = len(r["traj"]), max(r["tokens"])
        response_mask = torch.zeros(n, width)
        token_level_rewards = torch.zeros(n, width)
        for i, length in enumerate(r["tokens"]):
            response_mask[i, :length] = 1.0
            token_level_rewards[i, length - 1] = r["episode"][i]
        batch = SimpleNamespace(
            non_tensor_batch={
                "rewards": np.array(r["rewards"], dtype=object),
                "traj_uid": np.array(r["traj"], dtype=object),
                "active_masks": np.ones(n, dtype=bool),
            },
            batch={"input_ids": torch.zeros(n, 1)},
        )
        step_rewards = gigpo["compute_step_discounted_returns"](batch, case["gamma"])
        for mode in MODES:
            advantages, _ = gigpo["compute_gigpo_outcome_advantage"](
                token_level_rewards=token_level_rewards.clone(),
                step_rewards=step_rewards.clone(),
                response_mask=response_mask,
                anchor_obs=np.array(r["obs"], dtype=object),
                index=np.array(["g"] * n, dtype=object),
                traj_index=np.array(r["traj"], dtype=object),
                step_advantage_w=case["step_advantage_w"],
                mode=mode,
            )
            fixture["cases"].append(
                {
                    "gamma": case["gamma"],
                    "step_advantage_w": case["step_advantage_w"],
                    "mode": mode,
                    "group": [[reward, [list(s) for s in steps]] for reward, steps in case["group"]],
                    "step_rewards": [float(x) for x in step_rewards],
                    "advantages": [advantages[i, : r["tokens"][i]].tolist() for i in range(n)],
                }
            )
    common.write("gigpo", fixture, args.out)


if __name__ == "__main__":
    main()
