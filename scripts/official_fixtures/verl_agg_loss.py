"""Make tests/backend/estimators/fixtures/official/verl_agg_loss.json from verl's `agg_loss`.

    python scripts/official_fixtures/verl_agg_loss.py /path/to/verl   # volcengine/verl at b178a3c

For each loss-aggregation mode, the per-token weight c_{i,t} is the gradient of
`agg_loss(loss_mat, loss_mask, mode)` (verl/trainer/ppo/core_algos.py) with respect to `loss_mat`, on the
batch below (six responses and one empty one, as the legacy actor calls it: no global batch info).
`seq-mean-token-sum-norm` is called with `loss_scale_factor = L_BUDGET`; it divides the summed token
losses by that factor alone (c = 1/16 here), and verl's dp_actor then multiplies each micro-batch's loss
by 1/gradient_accumulation, so its c is m/(B L) for micro-batches of m rows: the Dr. GRPO 1/(B L) only
when m = 1. Credit Lens's `dr-grpo` mode follows TRL's `dr_grpo` instead, which the tests call directly.
"""

from __future__ import annotations

import common
import torch

REPOSITORY = "volcengine/verl"
COMMIT = "b178a3cd56f58b2d502255daba591e92833930a7"
FUNCTION = "verl/trainer/ppo/core_algos.py agg_loss (gradient with respect to loss_mat)"
L_BUDGET = 16
MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")

# (token_ids, group_id, score); the last response is empty (every token masked).
RECORDS = [
    ([1, 4, 5, 3], 0, 1),
    ([2, 2, 2], 0, 0),
    ([2, 1, 1, 5], 0, 0.5),
    ([4], 1, 0),
    ([1], 1, 1),
    ([2, 5, 2, 4, 5, 2], 1, 0.2),
    ([], 1, 0.7),
]


def weights(core_algos, mode: str) -> torch.Tensor:
    """c (B, T) float32: d agg_loss / d loss_mat."""
    T = max(len(ids) for ids, _, _ in RECORDS)
    mask = torch.tensor([[1.0] * len(ids) + [0.0] * (T - len(ids)) for ids, _, _ in RECORDS])  # (B, T)
    loss_mat = torch.ones_like(mask, requires_grad=True)
    scale = L_BUDGET if mode == "seq-mean-token-sum-norm" else None
    core_algos.agg_loss(
        loss_mat=loss_mat, loss_mask=mask, loss_agg_mode=mode, loss_scale_factor=scale
    ).backward()
    return loss_mat.grad * mask


def main() -> None:
    args = common.parse_args(__doc__, REPOSITORY, COMMIT)
    commit = common.checkout_commit(args.checkout, COMMIT, args.any_commit)
    common.use_checkout(args.checkout)
    from verl.trainer.ppo import core_algos  # noqa: PLC0415 - from the checkout, after use_checkout

    fixture = common.provenance(
        "verl_agg_loss.py",
        REPOSITORY,
        COMMIT,
        commit,
        FUNCTION,
        ("torch", "numpy", "omegaconf", "tensordict", "transformers"),
    )
    fixture["l_budget"] = L_BUDGET
    fixture["loss_scale_factor"] = {"seq-mean-token-sum-norm": L_BUDGET}
    fixture["records"] = [
        {"token_ids": ids, "group_id": group, "rollout_id": 99 if not ids else i, "scores": {"task": score}}
        for i, (ids, group, score) in enumerate(RECORDS)
    ]
    fixture["c"] = {mode: weights(core_algos, mode).tolist() for mode in MODES}
    common.write("verl_agg_loss", fixture, args.out)


if __name__ == "__main__":
    main()
