"""Make tests/backend/estimators/fixtures/official/gcpo.json from the official GCPO code.

    python scripts/official_fixtures/gcpo.py /path/to/gcpo   # a checkout of jacklishufan/gcpo at the commit

Calls `DataParallelPPOActor.compute_importance_weights` (verl/workers/actor/dp_actor.py) on an object that
holds only what the method reads, `data_config` (importance_weighting_type "kl", importance_normalization
"hist"), with the log-probabilities of each response under the true and the negative prompt written below.
"""

from __future__ import annotations

from types import SimpleNamespace

import common
import torch

REPOSITORY = "jacklishufan/gcpo"
COMMIT = "e0f183de1ddad5714587be3eaed5b01be44724ee"
FUNCTION = (
    "verl/workers/actor/dp_actor.py DataParallelPPOActor.compute_importance_weights "
    "(importance_weighting_type kl, importance_normalization hist)"
)

# (response lengths, log p under the true prompt, log p under the negative prompt), (B, T) right-padded
CASES = [
    (
        [9, 4, 7, 1],
        [
            [
                -1.488769769668579,
                -2.3046653270721436,
                -0.26543229818344116,
                -0.3960914611816406,
                -0.9222684502601624,
                -1.902235984802246,
                -1.4702801704406738,
                -2.6893341541290283,
                -1.3668839931488037,
            ],
            [
                -1.896918773651123,
                -1.0466804504394531,
                -1.205151915550232,
                -0.06697726249694824,
                -0.5065768361091614,
                -0.8816653490066528,
                -1.555565357208252,
                -2.0930027961730957,
                -2.400034189224243,
            ],
            [
                -0.4830883741378784,
                -0.8468057513237,
                -2.044825553894043,
                -2.745581865310669,
                -1.1912996768951416,
                -2.622467517852783,
                -1.2582249641418457,
                -1.6587212085723877,
                -2.8582143783569336,
            ],
            [
                -0.10849446058273315,
                -0.5556930899620056,
                -1.1202521324157715,
                -0.9153000712394714,
                -2.7960011959075928,
                -0.5277305245399475,
                -0.8095006942749023,
                -0.45203930139541626,
                -0.09515851736068726,
            ],
        ],
        [
            [
                -0.6093780994415283,
                -2.079843044281006,
                1.0161523818969727,
                0.4862210750579834,
                -1.3539949655532837,
                -3.3873324394226074,
                -0.3448374271392822,
                -2.170079231262207,
                -0.3211630582809448,
            ],
            [
                2.707491874694824,
                -3.9844682216644287,
                -4.3785295486450195,
                2.339470148086548,
                -0.337507426738739,
                -3.2819442749023438,
                -1.5651367902755737,
                -2.55367374420166,
                -3.1835429668426514,
            ],
            [
                0.6035010814666748,
                -1.6371208429336548,
                0.9734182357788086,
                1.4183290004730225,
                2.222123622894287,
                2.1382675170898438,
                -3.5094282627105713,
                -2.292717456817627,
                -5.043150901794434,
            ],
            [
                -0.27888303995132446,
                0.09953552484512329,
                -2.6416664123535156,
                -4.113463878631592,
                -2.7590279579162598,
                -2.0285842418670654,
                -0.43868473172187805,
                0.7902373671531677,
                1.1812045574188232,
            ],
        ],
    ),
    (
        [9, 4, 7, 1],
        [
            [
                -2.272894859313965,
                -0.8379326462745667,
                -1.2092077732086182,
                -2.2040534019470215,
                -0.08784466981887817,
                -2.39957594871521,
                -1.1914119720458984,
                -2.263115882873535,
                -1.7085254192352295,
            ],
            [
                -1.3163337707519531,
                -1.916041374206543,
                -1.5739977359771729,
                -2.047842264175415,
                -0.9154484868049622,
                -1.390636920928955,
                -1.3649590015411377,
                -1.7174159288406372,
                -1.4940078258514404,
            ],
            [
                -2.8112502098083496,
                -1.966785192489624,
                -0.9413906335830688,
                -0.5940579771995544,
                -1.2485765218734741,
                -0.8529889583587646,
                -1.019327163696289,
                -1.5718224048614502,
                -2.3941917419433594,
            ],
            [
                -2.31530499458313,
                -0.03367370367050171,
                -2.4298806190490723,
                -1.9190458059310913,
                -2.922833204269409,
                -2.4900896549224854,
                -0.13329344987869263,
                -0.0737873911857605,
                -0.7765018343925476,
            ],
        ],
        [
            [
                -1.874781847000122,
                -0.7465270757675171,
                -0.9032939672470093,
                -3.1554110050201416,
                -3.8521296977996826,
                -3.9526660442352295,
                2.856992244720459,
                -2.4361982345581055,
                3.0056965351104736,
            ],
            [
                -3.3910112380981445,
                1.2335548400878906,
                -2.8336920738220215,
                2.7661139965057373,
                -0.35831600427627563,
                -0.897131085395813,
                1.0036942958831787,
                -0.1922147274017334,
                -0.6109859943389893,
            ],
            [
                -0.4809732437133789,
                2.0639984607696533,
                1.0260281562805176,
                1.1645143032073975,
                -4.149349689483643,
                -3.2134199142456055,
                -0.19938230514526367,
                -0.7549210786819458,
                -1.8784608840942383,
            ],
            [
                -0.12526226043701172,
                2.619114398956299,
                -0.7204370498657227,
                -2.4800937175750732,
                -1.5228002071380615,
                -5.403555870056152,
                3.0845773220062256,
                0.11375255882740021,
                -3.2960000038146973,
            ],
        ],
    ),
]


def main() -> None:
    args = common.parse_args(__doc__, REPOSITORY, COMMIT)
    commit = common.checkout_commit(args.checkout, COMMIT, args.any_commit)
    common.use_checkout(args.checkout)
    from verl.workers.actor.dp_actor import DataParallelPPOActor  # noqa: PLC0415 - from the checkout

    owner = SimpleNamespace(
        data_config=SimpleNamespace(importance_weighting_type="kl", importance_normalization="hist")
    )
    cases = []
    for lengths, logp_pos, logp_neg in CASES:
        pos, neg = torch.tensor(logp_pos), torch.tensor(logp_neg)  # (B, T) float32
        mask = (torch.arange(pos.shape[1])[None, :] < torch.tensor(lengths)[:, None]).long()  # (B, T)
        weights = DataParallelPPOActor.compute_importance_weights(owner, pos, neg, mask)
        cases.append(
            {"logp_pos": logp_pos, "logp_neg": logp_neg, "lengths": lengths, "weights": weights.tolist()}
        )
    fixture = common.provenance(
        "gcpo.py", REPOSITORY, COMMIT, commit, FUNCTION, ("torch", "einops", "pillow", "ray", "transformers")
    )
    fixture["cases"] = cases
    common.write("gcpo", fixture, args.out)


if __name__ == "__main__":
    main()
