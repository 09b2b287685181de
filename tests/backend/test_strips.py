"""Per-token strips: log-ratios k1/k3 (Schulman 2020), ratio to the stored old logprobs, loss mask."""

from __future__ import annotations

import numpy as np
import torch

from backend.core.batch import batch_from_records
from backend.views import strips


def test_k1_k3_and_the_old_new_ratio_from_stored_logprobs():
    logprob, ref, old = [-0.5, -1.0, -2.0], [-0.7, -1.0, -1.0], [-0.5, -1.5, -2.0]
    batch = batch_from_records(
        [
            {
                "token_ids": [1, 2, 3],
                "group_id": 0,
                "logprobs": logprob,
                "ref_logprobs": ref,
                "scores": {"task": 1.0},
                "extras": {"old_logprobs": old},
                "loss_mask": [1, 0, 1],
            }
        ]
    )
    out = strips.token_strips(batch, 0)
    d = np.array(logprob) - np.array(ref)
    assert np.allclose(out["log-ratio k1"], d, atol=1e-6)
    r = np.exp(-d)  # π_ref / π
    assert np.allclose(out["log-ratio k3"], (r - 1) - np.log(r), atol=1e-6)
    assert (out["log-ratio k3"] >= -1e-9).all() and out["log-ratio k3"][1] == 0  # k3 ≥ 0, 0 where equal
    assert np.allclose(out["ratio new/old"], np.exp(np.array(logprob) - np.array(old)), atol=1e-6)
    assert "entropy" not in out and "value" not in out  # not stored: left out, not zero
    assert strips.loss_mask(batch, 0).tolist() == [True, False, True]


def test_a_run_without_logprobs_has_no_strips():
    batch = batch_from_records([{"token_ids": [1, 2], "group_id": 0, "scores": {"task": 0.0}}])
    assert strips.token_strips(batch, 0) == {} and strips.loss_mask(batch, 0) is None
    assert isinstance(batch.token_ids, torch.Tensor)
