"""Make tests/backend/fixtures/official/cliff_tokens.json from the official Cliff-token code.

    python scripts/official_fixtures/cliff_tokens.py /path/to/Cliff-token   # a work tree at the commit below

Runs, unchanged, the official test (`src/analysis/cliff_threshold.py`: `is_cliff`, `build_cliff_matrix`)
and detectors (`src/analysis/detector.py`: `find_all_cliff_tokens_statistical`,
`find_first_cliff_token_statistical`), which need only numpy. Inputs:
- the whole (N + 1) x (N + 1) table of `is_cliff(k_prev, k_curr)` for several N, δ0 and z_α, stored as
  the list of (k_prev, k_curr) pairs that are cliffs;
- score arrays as the official rollout stage stores them (index j holds k/64, the success rate of the
  prefix of j + 1 tokens; None where a position was not valued), drawn below with a fixed seed, and the
  cliffs the detectors report on them (the detectors read the N = 64 matrix).
"""

from __future__ import annotations

import random

import common
import numpy as np

REPOSITORY = "beaver-22/Cliff-token"
COMMIT = "1df7c3c401380fbe9c68e77af83173c72b10ab88"
FUNCTION = (
    "src/analysis/cliff_threshold.py build_cliff_matrix (is_cliff); src/analysis/detector.py "
    "find_all_cliff_tokens_statistical, find_first_cliff_token_statistical"
)
OUT = common.ROOT / "tests" / "backend" / "fixtures" / "official" / "cliff_tokens.json"
MATRICES = [(64, 0.1, 1.645), (16, 0.1, 1.645), (8, 0.1, 1.645), (16, 0.2, 1.96)]


def score_arrays(seed: int = 0, count: int = 12) -> list[list]:
    """Random walks of k/64 with occasional falls and gaps (None), lengths 5 to 40."""
    rng = random.Random(seed)
    arrays = []
    for a in range(count):
        k = rng.randint(0, 64)
        scores = []
        for _ in range(rng.randint(5, 40)):
            step = rng.choice([0, 0, 1, -1, 2, -2, -8, -20, 5])
            k = min(64, max(0, k + step))
            gap = a % 3 == 2 and rng.random() < 0.4  # a third of the arrays are sparse (windowed rollouts)
            scores.append(None if gap else k / 64)
        arrays.append(scores)
    arrays.append([1.0, 0.9375, 0.875, 0.0, 0.0])  # a deterministic fall, then nothing
    arrays.append([0.0, 0.0, 0.5, 0.0])  # k_prev = 0 never starts a cliff; 0.5 -> 0 does
    return arrays


def main() -> None:
    args = common.parse_args(__doc__, REPOSITORY, COMMIT)
    commit = common.checkout_commit(args.checkout, COMMIT, args.any_commit)
    common.use_checkout(args.checkout)
    from src.analysis import cliff_threshold, detector  # noqa: PLC0415 - from the checkout, after use_checkout

    fixture = common.provenance("cliff_tokens.py", REPOSITORY, COMMIT, commit, FUNCTION, ("numpy",))
    fixture["matrices"] = []
    for N, delta_0, z_alpha in MATRICES:
        M = cliff_threshold.build_cliff_matrix(N, delta_0, z_alpha)
        fixture["matrices"].append(
            {"N": N, "delta_0": delta_0, "z_alpha": z_alpha, "cliffs": np.argwhere(M).tolist()}
        )
    fixture["detections"] = []
    for scores in score_arrays():
        found = detector.find_all_cliff_tokens_statistical(scores)
        first = detector.find_first_cliff_token_statistical(scores)
        fixture["detections"].append(
            {
                "scores": scores,
                "cliff_positions": [c.position for c in found],
                "cliff_drops": [c.drop_magnitude for c in found],
                "first_position": None if first is None else first.position,
            }
        )
    common.write("cliff_tokens", fixture, args.out or OUT)


if __name__ == "__main__":
    main()
