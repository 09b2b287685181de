"""Every derivation prints each number it uses, and its lines add up: Dr. GRPO and RLOO show their own
formula (they printed GRPO's division by the std, which their Z does not do), value_anchored its w_abs, R
and anchor, suffix_mc its scale and the two values it subtracts, asymmetric_confidence the mean-one weight
A is made of; on the demo's rollout 357 at token 30 (R = 1, group mean 0.875, G = 8)."""

from __future__ import annotations

import pytest

from backend.estimators import registry
from backend.store import StoreHandle
from backend.views import explain

EXPECTED = {
    "dr_grpo": "Z = R − mean_G = 1 − 0.875 = 0.125",
    "rloo": "(R − mean_G) · G / (G − 1) = (1 − 0.875) × 8 / 7 = 0.1429",
    "value_anchored": "A_t = temporal + w_abs (R − anchor) = 0 + 0.1 × (1 − 0.5) = 0.05",
    "suffix_mc": "A_t = scale · (V̂ next − V̂ current) = 2.828 × (0.9375 − 0.9375) = 0",
    "asymmetric_confidence": "mean-one w_t / mean w = 1.001 / 1.037 = 0.9655",
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_the_derivation_prints_every_number_it_uses(bundled_db, name):
    config = registry.make_config(name, channel="task")
    terms = explain.scoped_terms(StoreHandle(bundled_db), "demo", 357, name, config)
    lines = explain.derivation(terms, 30)
    assert any(EXPECTED[name] in line for line in lines), lines
    assert not any("/ (std_G + ε)" in line for line in lines) or name not in ("dr_grpo", "rloo"), lines
