"""Make tests/backend/estimators/fixtures/official/oar.json from the official OAR code.

    python scripts/official_fixtures/oar.py /path/to/Outcome-Grounded-Advantage-Reshaping   # at the commit

`OAR-main.py` is a fragment of a trainer (it uses np, torch and F without importing them, and helpers it
does not define), so it is run as a file in a namespace that supplies those names. Its
`calculate_oar_hybrid_weights(self, inputs, model)` runs unchanged; the model calls are replaced by the
importance scores written below: `create_test_case` and `prepare_input_segments` pass the reasoning (here
the scores) through, and `calculate_token_importance_gradient` returns them (method "gradient"). It is
called once per response: within one call the loop reassigns `threshold` to the first response's
quantile value, which later responses would take as their quantile level.
"""

from __future__ import annotations

from types import SimpleNamespace

import common
import numpy as np
import torch
import torch.nn.functional as F

REPOSITORY = "Valsure/Outcome-Grounded-Advantage-Reshaping"
COMMIT = "8dbc47862b5c3636b6070be16c9a181b17ca6346"
FUNCTION = (
    "OAR-main.py calculate_oar_hybrid_weights, called once per response with the importance scores "
    "given (the model calls replaced)"
)

# (threshold, beta, sum_to_L, importance scores of each response's reasoning tokens)
CASES = [
    (
        0.5,
        1.0,
        True,
        [
            [0.01675, 0.13377, 0.01156, 0.03128, 0.8044, 0.0097, 1.37473],
            [0.0763, 1.11477, 0.01542, 0.06152, 0.00637],
            [4.6246, 0.62558, 0.12985, 0.12412, 4.83851, 5.30342, 0.70406, 0.10263, 0.0285],
            [0.0001, 0.1414, 0.2649, 0.02942, 0.06123, 0.28898],
        ],
    ),
    (
        0.8,
        2.0,
        True,
        [
            [5.06656, 0.17245, 1.71509, 0.23871, 0.40443, 0.04072, 0.00121],
            [0.25253, 0.01533, 0.08953, 0.87623, 0.14109],
            [1.81996, 0.52741, 0.01466, 0.07759, 3.30624, 0.00011, 2.22881, 8.17361, 0.03326],
            [0.0012, 0.54586, 0.12305, 0.00024, 3.14201, 0.56735],
        ],
    ),
    (
        0.3,
        0.5,
        False,
        [
            [0.29987, 0.84617, 2.9897, 0.04753, 0.0017, 2.19278, 0.23311],
            [0.22895, 0.09278, 2.02327, 0.90596, 0.14982],
            [2.14089, 8.3876, 3.09749, 0.01371, 3.00687, 0.1936, 6.85839, 15.9694, 0.04565],
            [0.39911, 1.40412, 0.93364, 1.33749, 0.00389, 0.01485],
        ],
    ),
]


def official_weights(oar: dict, scores: list[float], threshold: float, beta: float, sum_to_L: bool) -> list:
    owner = SimpleNamespace(
        tokenizer=None,
        args=SimpleNamespace(
            threshold=threshold, beta=beta, method="gradient", sum_to_L=sum_to_L, device="cpu"
        ),
    )
    inputs = {"reasoning": [scores], "intro": "", "question": "", "bridge": "", "conclude": "", "answer": ""}
    (weights,) = oar["calculate_oar_hybrid_weights"](owner, inputs, model=None)
    return weights.tolist()


def main() -> None:
    args = common.parse_args(__doc__, REPOSITORY, COMMIT)
    commit = common.checkout_commit(args.checkout, COMMIT, args.any_commit)
    oar = common.load_file(
        args.checkout / "OAR-main.py", {"np": np, "torch": torch, "F": F, "PAD_TOKEN_ID": 0}
    )
    oar["create_test_case"] = lambda intro, question, bridge, reasoning, conclude, answer: reasoning
    oar["prepare_input_segments"] = lambda case, tokenizer: case
    oar["calculate_token_importance_gradient"] = lambda model, tokenizer, segments, device: segments
    fixture = common.provenance("oar.py", REPOSITORY, COMMIT, commit, FUNCTION, ("torch", "numpy"))
    fixture["cases"] = [
        {
            "threshold": threshold,
            "beta": beta,
            "sum_to_L": sum_to_L,
            "scores": scores,
            "weights": [official_weights(oar, s, threshold, beta, sum_to_L) for s in scores],
        }
        for threshold, beta, sum_to_L, scores in CASES
    ]
    common.write("oar", fixture, args.out)


if __name__ == "__main__":
    main()
