"""Per-token strips of one rollout: what the policy and the reference said about each token.

The rows a rollout dashboard draws under the credit: logprob log π(y_t), reference logprob
log π_ref(y_t), the log-ratio to the reference in two forms, entropy, the stored critic value, and the
old-vs-new probability ratio where the run stored the behaviour policy's logprobs. `creditlens explain
--json` prints them (`strips`), the Rollout view draws them.

Log-ratio estimators of KL(π ‖ π_ref) from samples of π (Schulman, "Approximating KL Divergence", 2020):
with d_t = log π(y_t) − log π_ref(y_t) and r_t = π_ref/π = exp(−d_t),
  k1_t = d_t                    (unbiased, can be negative)
  k3_t = (r_t − 1) − log r_t    (unbiased, always ≥ 0; verl's `low_var_kl` before its clamp)
"""

from __future__ import annotations

import numpy as np

from backend.core.batch import RolloutBatch

OLD_LOGPROBS = "old_logprobs"  # extras key: the behaviour (rollout-time) policy's logprobs, (B, T)


def _row(x, row: int, L: int) -> np.ndarray | None:
    if x is None or getattr(x, "dim", lambda: 0)() != 2:
        return None
    return x[row, :L].double().numpy()


def token_strips(batch: RolloutBatch, row: int) -> dict[str, np.ndarray]:
    """name -> (L,) float64 for the per-token facts this rollout has (absent ones are left out).

    Names: logprob, ref logprob, log-ratio k1, log-ratio k3, entropy, value, ratio new/old."""
    L = int(batch.lengths[row])
    logprob = _row(batch.logprobs, row, L)
    ref = _row(batch.ref_logprobs, row, L)
    old = _row(batch.extras.get(OLD_LOGPROBS), row, L)
    out: dict[str, np.ndarray] = {}
    if logprob is not None:
        out["logprob"] = logprob
    if ref is not None:
        out["ref logprob"] = ref
    if logprob is not None and ref is not None:
        d = logprob - ref  # (L,)
        out["log-ratio k1"] = d
        out["log-ratio k3"] = np.expm1(-d) + d
    for name, x in (("entropy", batch.entropies), ("value", batch.values)):
        got = _row(x, row, L)
        if got is not None:
            out[name] = got
    if logprob is not None and old is not None:
        out["ratio new/old"] = np.exp(logprob - old)
    return out


def loss_mask(batch: RolloutBatch, row: int) -> np.ndarray | None:
    """(L,) bool: True where the token entered the loss, or None when the run stored no loss mask."""
    L = int(batch.lengths[row])
    if batch.loss_mask is None:
        return None
    return batch.loss_mask[row, :L].cpu().numpy().astype(bool)
