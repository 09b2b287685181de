"""verl `rollout_data_dir` dumps, written line for line as verl's own code writes them.

verl itself is not installed in the test environment (its import pulls ray, tensordict, omegaconf and
more), so these writers reproduce, from verl-project/verl at commit
1dda039b9c6311889a9c9a26040677e1254814f9:
- legacy trainer: `verl/trainer/ppo/ray_trainer.py`, `RayPPOTrainer._log_rollout_data` (decoded
  prompts/responses, `token_level_scores.sum(-1)`, `reward_model.ground_truth`, reward extra infos plus
  `request_id` when the batch has one) and `_write_generations` (`{step}.jsonl`, keys input, output,
  gts, score, step, then every extra list of length n, `json.dumps(entry, ensure_ascii=False,
  default=str)` per line);
- v1 trainer: `verl/trainer/ppo/v1/trainer_base.py`, `_log_rollout_data` (rows sorted by the
  TransferQueue key, the key dumped as `uid`) and `_write_generations` (same keys, numpy values through
  `json_encode_default`); the key is `{uid}_{session_id}_{index}`
  (`verl/trainer/ppo/v1/agent_loop_tq.py`), so the rollouts of one prompt share the uid prefix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np


def write_generations(
    dump_path: Path, global_steps: int, inputs, outputs, gts, scores, reward_extra_infos_dict: dict, v1: bool
) -> Path:
    """verl's `_write_generations` (legacy: `default=str`; v1: `json_encode_default`)."""
    os.makedirs(dump_path, exist_ok=True)
    filename = os.path.join(dump_path, f"{global_steps}.jsonl")
    n = len(inputs)
    base_data = {"input": inputs, "output": outputs, "gts": gts, "score": scores, "step": [global_steps] * n}
    for k, v in reward_extra_infos_dict.items():
        if len(v) == n:
            base_data[k] = v
    with open(filename, "w") as f:
        for i in range(n):
            entry = {k: v[i] for k, v in base_data.items()}
            if v1:
                f.write(json.dumps(entry, ensure_ascii=False, default=_v1_default) + "\n")
            else:
                f.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
    return Path(filename)


def _v1_default(obj):
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


# One step of a GSM8K-like run on the demo policy's alphabet: (prompt, [(response, score, acc)], gts).
GROUPS = [
    (
        "12+34=?\n",
        [("2+4=6\n1+3=4\n#### 46", 1.0, True), ("2+4=6\n#### 6", 0.0, False), ("1+3=4\n#### 46", 1.0, True)],
        "46",
    ),
    ("12+34=?\n", [("#### 46", 1.0, True), ("#### 47", 0.0, False), ("2+4=7\n#### 47", 0.0, False)], "46"),
    (
        "5+7=?\n",
        [("5+7=12\n#### 12", 1.0, True), ("#### 13", 0.0, False), ("5+7=12\n#### 12", 1.0, True)],
        ["12", "12.0"],
    ),
]


def legacy_step(dump_path: Path, step: int) -> Path:
    """Legacy trainer: rows as the batch holds them (no uid in the dump), `request_id` per sample."""
    inputs, outputs, gts, scores, acc, request_ids = [], [], [], [], [], []
    for g, (prompt, responses, truth) in enumerate(GROUPS):
        for k, (response, score, ok) in enumerate(responses):
            inputs.append(prompt)
            outputs.append(response)
            gts.append(truth)
            scores.append(score)
            acc.append(ok)
            request_ids.append(f"req-{step}-{g}-{k}")
    return write_generations(
        dump_path, step, inputs, outputs, gts, scores, {"acc": acc, "request_id": request_ids}, v1=False
    )


def v1_step(dump_path: Path, step: int, acc: bool = False) -> Path:
    """v1 trainer: `uid` = TransferQueue key `{prompt uid}_{session}_{index}`, rows sorted by it.

    acc: the reward's extra info carries `acc` (a numpy bool per sample, as the batch's non-tensor arrays
    hold it), what verl's `DAPORewardManager` logs for a plain score (`reward_extra_info["acc"].append(
    reward > 0)`, verl/workers/reward_manager/dapo.py) and what a reward function's dict adds beside
    `score` under `NaiveRewardManager` (verl/workers/reward_manager/naive.py)."""
    rows = []
    for g, (prompt, responses, truth) in enumerate(GROUPS):
        prompt_uid = f"7f3c{g}a-{step}"
        for k, (response, score, _ok) in enumerate(responses):
            rows.append((f"{prompt_uid}_{k}_0", prompt, response, truth, score))
    rows.sort(key=lambda r: (r[0].rsplit("_", 2)[0], int(r[0].rsplit("_", 2)[1]), 0))
    columns = list(zip(*rows, strict=True))
    extra = {"uid": list(columns[0])}
    if acc:
        extra["acc"] = np.array([score > 0 for score in columns[4]])
    return write_generations(
        dump_path,
        step,
        list(columns[1]),
        list(columns[2]),
        list(columns[3]),
        list(columns[4]),
        extra,
        v1=True,
    )
