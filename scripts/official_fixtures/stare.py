"""Make tests/backend/estimators/fixtures/official/stare.json from the official STARE code.

    python scripts/official_fixtures/stare.py /path/to/STARE   # a checkout of hp-luo/STARE at the commit

For each case below: the batch entropy is the official `agg_loss(entropies, mask, "token-mean")` (the
trainer logs it as actor/entropy); `STAREController(target_entropy=0.3, reweight_w=1.1, reweight_m=0.9)
.update(batch_entropy)` sets the gate; `compute_stare_token_weights(log_prob, A, mask, config,
controller.__dict__)` gives omega, with A the official `compute_grpo_outcome_advantage` (epsilon 1e-6) of
the task scores. The STARE policy loss multiplies each token's clipped surrogate by omega, so at the
old policy the token's push is omega * A: the fixture's `advantages`. At this commit the trainer never
builds a STAREController; the controller is driven here as its docstring says the trainer should.
"""

from __future__ import annotations

import common
import numpy as np
import torch

REPOSITORY = "hp-luo/STARE"
COMMIT = "bffb9e79c96c318340e35402993d60548d864315"
FUNCTION = (
    "verl/trainer/ppo/core_algos.py compute_stare_token_weights + STAREController.update(agg_loss "
    "token-mean entropy), advantages = omega * compute_grpo_outcome_advantage"
)
TARGET_ENTROPY, WEIGHT, WEIGHT_NEG = 0.3, 1.1, 0.9

# (variant, top_p, [(token_ids, group_id, score, entropies, logprobs), ...])
CASES = [
    (
        "O1",
        0.1,
        [
            ([4, 2], 0, 1, [0.3377, 0.2186], [-1.6091, -1.1888]),
            ([4], 0, 0, [0.2381], [-0.7111]),
            ([1, 3], 0, 1, [0.2675, 0.1917], [-1.108, -0.3258]),
            (
                [1, 2, 5, 1, 4, 2, 3, 4],
                0,
                0.5,
                [0.3541, 0.0603, 0.1098, 0.3186, 0.3324, 0.1223, 0.1951, 0.1164],
                [-1.8464, -1.2026, -1.1604, -0.059, -0.6818, -2.243, -1.0916, -2.9794],
            ),
            ([2], 1, 0, [0.2678], [-0.1028]),
            (
                [1, 3, 5, 3, 4],
                1,
                1,
                [0.2557, 0.2128, 0.1625, 0.1926, 0.3022],
                [-0.2003, -2.8708, -1.0597, -1.0908, -0.5885],
            ),
            ([3, 3, 5], 1, 1, [0.1505, 0.1347, 0.1312], [-2.8441, -1.5052, -1.2762]),
            (
                [5, 1, 4, 1, 3],
                1,
                1,
                [0.1987, 0.2086, 0.247, 0.3388, 0.1463],
                [-1.6487, -2.473, -2.849, -2.4716, -0.7905],
            ),
            (
                [2, 5, 5, 2, 4, 1],
                2,
                0.2,
                [0.0686, 0.3055, 0.3159, 0.2328, 0.3822, 0.1265],
                [-0.8374, -2.9151, -1.847, -0.0194, -1.3, -0.9516],
            ),
            (
                [2, 2, 5, 1, 4, 1, 3, 3, 3],
                2,
                0.9,
                [0.233, 0.2835, 0.1097, 0.2635, 0.2215, 0.1459, 0.2023, 0.3207, 0.3156],
                [-1.2552, -2.3793, -1.3186, -1.4189, -0.6803, -1.4967, -0.1715, -2.5378, -1.11],
            ),
            (
                [4, 1, 2, 4, 4, 5],
                2,
                0.4,
                [0.0598, 0.0403, 0.3579, 0.2954, 0.1721, 0.2736],
                [-2.1576, -1.3029, -0.4943, -0.3388, -1.0214, -0.6315],
            ),
            (
                [5, 2, 2, 5, 4, 5],
                2,
                0.1,
                [0.1976, 0.1358, 0.0966, 0.2713, 0.1836, 0.1982],
                [-2.9581, -2.9653, -1.61, -0.334, -2.5119, -1.9523],
            ),
        ],
    ),
    (
        "O1",
        0.1,
        [
            (
                [4, 5, 1, 5, 1, 5, 1],
                0,
                1,
                [1.1089, 1.8682, 1.0967, 0.659, 1.9402, 1.6004, 1.8834],
                [-2.758, -2.7262, -0.721, -1.9974, -1.2154, -1.3126, -2.9951],
            ),
            (
                [4, 1, 4, 4, 4, 5, 5, 2],
                0,
                0,
                [1.4976, 0.895, 1.2884, 0.9775, 1.3125, 1.4395, 0.3018, 1.7903],
                [-1.0783, -0.016, -0.8982, -1.4481, -2.5223, -2.5445, -1.3725, -2.1296],
            ),
            (
                [1, 2, 4, 4, 5],
                0,
                1,
                [1.1181, 0.7005, 0.6267, 0.2805, 1.4866],
                [-1.8356, -0.667, -1.1011, -0.0692, -1.7203],
            ),
            ([4, 4], 0, 0.5, [0.835, 0.7171], [-0.2602, -2.772]),
            ([3], 1, 0, [1.365], [-0.658]),
            (
                [4, 3, 5, 1, 3, 2, 3, 1],
                1,
                1,
                [1.7037, 1.7252, 1.8056, 0.8865, 0.7445, 0.2103, 0.6345, 0.6044],
                [-0.2635, -2.8582, -0.5906, -2.9375, -0.3364, -0.3443, -1.4954, -1.6737],
            ),
            ([5, 4], 1, 1, [0.0079, 0.0411], [-1.8032, -0.3321]),
            (
                [4, 4, 1, 1, 2],
                1,
                1,
                [1.8782, 0.0307, 1.0844, 0.2862, 1.5729],
                [-0.8508, -2.8541, -1.9849, -0.882, -0.8054],
            ),
            ([4, 4], 2, 0.2, [1.8861, 0.8598], [-0.4247, -0.6292]),
            (
                [2, 4, 4, 1, 5, 3, 1],
                2,
                0.9,
                [0.8244, 1.16, 0.2866, 0.6025, 0.2354, 0.6551, 1.0011],
                [-2.3766, -0.3906, -0.3763, -0.3964, -1.1762, -2.7083, -2.9617],
            ),
            (
                [3, 3, 3, 2, 5, 2, 4, 2],
                2,
                0.4,
                [1.2916, 0.6672, 0.6472, 1.284, 0.7377, 1.1717, 0.3841, 1.1743],
                [-2.5671, -1.9399, -0.8906, -0.8915, -0.9594, -1.009, -2.4604, -0.2832],
            ),
            ([2, 5, 4, 4], 2, 0.1, [1.1733, 1.5486, 1.4337, 0.0639], [-0.1234, -1.9564, -2.6006, -2.7145]),
        ],
    ),
    (
        "C2",
        0.3,
        [
            (
                [3, 3, 3, 2, 4, 2, 2, 3, 1],
                0,
                1,
                [0.278, 0.1822, 0.328, 0.3133, 0.3064, 0.0505, 0.2641, 0.2934, 0.2928],
                [-1.0407, -1.7951, -2.6469, -1.1685, -0.8111, -0.8223, -2.5658, -2.4051, -2.1725],
            ),
            (
                [5, 1, 1, 1, 2, 1, 5, 5, 4],
                0,
                0,
                [0.2155, 0.1619, 0.2502, 0.0855, 0.3982, 0.0702, 0.1647, 0.2505, 0.0425],
                [-2.9658, -0.2159, -2.1836, -0.1983, -1.4505, -2.6931, -1.8654, -0.6552, -2.7777],
            ),
            ([4, 2, 4], 0, 1, [0.2046, 0.2577, 0.1515], [-1.6101, -1.6115, -0.628]),
            (
                [4, 2, 2, 2, 2, 3, 4],
                0,
                0.5,
                [0.0036, 0.2078, 0.0545, 0.1891, 0.0345, 0.0591, 0.2848],
                [-2.5015, -1.0447, -2.3951, -0.6901, -1.1741, -1.7794, -0.6057],
            ),
            ([5, 5, 5, 4], 1, 0, [0.0726, 0.3784, 0.3777, 0.0725], [-0.6404, -2.2819, -2.327, -2.9098]),
            ([3, 3, 1], 1, 1, [0.2115, 0.1819, 0.0707], [-2.1702, -1.533, -2.302]),
            ([4, 2], 1, 1, [0.2782, 0.2163], [-2.8875, -2.8968]),
            (
                [5, 4, 1, 1, 1, 4, 2, 3, 4],
                1,
                1,
                [0.1201, 0.053, 0.271, 0.0436, 0.0592, 0.1656, 0.3798, 0.1315, 0.2111],
                [-1.6193, -0.044, -0.855, -0.4624, -0.7345, -0.9029, -1.2299, -1.3455, -1.3744],
            ),
            ([2, 1, 5], 2, 0.2, [0.336, 0.2113, 0.0859], [-1.2535, -0.0412, -2.5944]),
            (
                [4, 4, 1, 1, 3, 5, 2, 4],
                2,
                0.9,
                [0.0257, 0.1802, 0.3412, 0.1353, 0.1778, 0.3128, 0.0972, 0.0632],
                [-2.3028, -0.6096, -0.5665, -0.0643, -0.7512, -2.6186, -0.4123, -1.0963],
            ),
            ([4, 4, 3, 5], 2, 0.4, [0.1218, 0.1724, 0.353, 0.399], [-1.35, -1.6295, -2.4369, -0.9577]),
            (
                [4, 1, 5, 3, 5, 5, 3, 4, 4],
                2,
                0.1,
                [0.3478, 0.0554, 0.1954, 0.2473, 0.1667, 0.2033, 0.0129, 0.2056, 0.1088],
                [-1.1173, -1.641, -0.8657, -0.0541, -1.0246, -1.4091, -2.5273, -0.8957, -1.3697],
            ),
        ],
    ),
    (
        "O1",
        0.25,
        [
            (
                [2, 3, 3, 2, 4, 1],
                0,
                1,
                [0.1349, 0.1184, 0.0889, 0.0065, 0.2048, 0.2918],
                [-1.2709, -1.4665, -2.819, -0.856, -1.2594, -2.6375],
            ),
            ([2, 4, 5], 0, 0, [0.2245, 0.1061, 0.3126], [-2.4321, -0.1164, -1.7727]),
            ([4], 0, 1, [0.1991], [-0.0226]),
            ([1, 3], 0, 0.5, [0.2824, 0.0229], [-1.0613, -0.1198]),
            ([5, 4, 1, 2], 1, 0, [0.2199, 0.2877, 0.3279, 0.0746], [-0.8386, -0.5518, -2.4003, -1.8084]),
            ([2, 2, 4, 1], 1, 1, [0.1057, 0.3548, 0.0654, 0.2526], [-0.7078, -2.4255, -2.8138, -1.44]),
            (
                [2, 2, 2, 3, 3, 5, 2, 2],
                1,
                1,
                [0.2575, 0.1698, 0.3121, 0.3048, 0.1274, 0.0505, 0.2057, 0.1542],
                [-2.4455, -0.9705, -1.1492, -1.1739, -2.3032, -1.9765, -2.9394, -0.66],
            ),
            (
                [3, 4, 5, 4, 1, 4, 1, 5, 5],
                1,
                1,
                [0.0299, 0.379, 0.1471, 0.3829, 0.3953, 0.3625, 0.2176, 0.1816, 0.3001],
                [-0.3148, -1.4109, -1.5102, -1.3886, -0.4859, -2.1119, -0.1705, -2.8974, -2.9345],
            ),
            (
                [3, 3, 5, 3, 5],
                2,
                0.2,
                [0.3114, 0.1155, 0.3323, 0.3163, 0.2566],
                [-0.8854, -0.2649, -2.925, -2.0595, -0.3214],
            ),
            (
                [2, 5, 3, 4, 3, 3, 5, 4],
                2,
                0.9,
                [0.1551, 0.025, 0.3814, 0.2184, 0.0849, 0.39, 0.0537, 0.1268],
                [-1.3336, -1.4479, -2.2375, -1.857, -2.1752, -1.776, -2.9836, -0.4103],
            ),
            (
                [3, 4, 1, 1, 1, 5, 4, 3, 3],
                2,
                0.4,
                [0.3448, 0.381, 0.3929, 0.3234, 0.2847, 0.3541, 0.1051, 0.2269, 0.3237],
                [-0.4373, -2.9515, -0.8667, -2.073, -1.5734, -0.5305, -2.2374, -2.6865, -2.2587],
            ),
            (
                [5, 5, 1, 4, 4, 4, 2],
                2,
                0.1,
                [0.2043, 0.2448, 0.319, 0.2309, 0.2021, 0.3924, 0.1365],
                [-1.5153, -1.9462, -0.7667, -0.4402, -2.8466, -1.6942, -1.9089],
            ),
        ],
    ),
]


def padded(rows: list[list[float]], T: int) -> torch.Tensor:
    out = torch.zeros(len(rows), T)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def run_case(core_algos, variant: str, top_p: float, records: list) -> dict:
    T = max(len(r[0]) for r in records)
    mask = padded([[1.0] * len(r[0]) for r in records], T)
    entropies = padded([r[3] for r in records], T)
    log_prob = padded([r[4] for r in records], T)
    token_level_rewards = torch.zeros(len(records), T)
    for i, (ids, _, score, _, _) in enumerate(records):
        token_level_rewards[i, len(ids) - 1] = score
    index = np.array([str(r[1]) for r in records], dtype=object)
    grpo, _ = core_algos.compute_grpo_outcome_advantage(token_level_rewards, mask, index, epsilon=1e-6)
    batch_entropy = core_algos.agg_loss(loss_mat=entropies, loss_mask=mask, loss_agg_mode="token-mean")
    controller = core_algos.STAREController(
        target_entropy=TARGET_ENTROPY, reweight_w=WEIGHT, reweight_m=WEIGHT_NEG
    )
    controller.update(float(batch_entropy))
    config = {
        "stare": {
            "enabled": True,
            "variant": variant,
            "top_p_ratio": top_p,
            "reweight_w": WEIGHT,
            "reweight_m": WEIGHT_NEG,
            "target_entropy": TARGET_ENTROPY,
        }
    }
    omega, _ = core_algos.compute_stare_token_weights(log_prob, grpo, mask, config, controller.__dict__)
    return {
        "records": [
            {
                "token_ids": ids,
                "group_id": group,
                "rollout_id": i,
                "scores": {"task": score},
                "entropies": ent,
                "logprobs": logp,
            }
            for i, (ids, group, score, ent, logp) in enumerate(records)
        ],
        "variant": variant,
        "top_p": top_p,
        "batch_entropy": float(batch_entropy),
        "gate_on": controller.gate_on,
        "omega": omega.tolist(),
        "advantages": (omega * grpo).tolist(),
    }


def main() -> None:
    args = common.parse_args(__doc__, REPOSITORY, COMMIT)
    commit = common.checkout_commit(args.checkout, COMMIT, args.any_commit)
    common.use_checkout(args.checkout)
    from verl.trainer.ppo import core_algos  # noqa: PLC0415 - from the checkout, after use_checkout

    fixture = common.provenance(
        "stare.py",
        REPOSITORY,
        COMMIT,
        commit,
        FUNCTION,
        ("torch", "numpy", "omegaconf", "tensordict", "transformers"),
    )
    fixture["target_entropy"] = TARGET_ENTROPY
    fixture["cases"] = [run_case(core_algos, variant, top_p, records) for variant, top_p, records in CASES]
    common.write("stare", fixture, args.out)


if __name__ == "__main__":
    main()
