"""How the run's trainer computed the advantage it logged, as estimator parameters: what `creditlens
logged-gap` recomputes with by default, so that a faithful recomputation shows no gap.

TRL's GRPOTrainer (1.16) divides by the group's std plus a constant 1e-4 (`grpo` defaults to 1e-6), and
`scale_rewards` chooses the std: the group's ("group", the default), none ("none": Dr. GRPO), or the
batch's ("batch", which no estimator here computes). The TRL importer keeps the ε with every rollout
(`advantage_epsilon` in its meta), the recorder (`creditlens.integrations.trl`) the ε and `scale_rewards`;
`Store.logged_conventions` reads them back.
"""

from __future__ import annotations

import dataclasses

from backend.estimators import registry
from backend.store import Store

# scale_rewards as TRL writes it (older TRL: a bool) -> whether the advantage is divided by a std.
_DIVIDES = {"group": True, "true": True, "batch": True, "none": False, "false": False}


def trainer_overrides(store: Store, run: str, estimator: str) -> tuple[dict[str, object], list[str]]:
    """(the parameters of `estimator` that reproduce the run's logged advantage, notes on what could not
    be reproduced). Only parameters the estimator has (grpo's `epsilon`, `norm_by_std`) and that the run's
    rollouts agree on; `--set` pairs override them."""
    fields = {f.name for f in dataclasses.fields(registry.get(estimator).config_cls)}
    conventions = store.logged_conventions(run)
    epsilons = sorted({e for e, _ in conventions if e is not None})
    scales = sorted({str(s).lower() for _, s in conventions if s is not None})
    overrides: dict[str, object] = {}
    notes: list[str] = []
    if "epsilon" in fields and len(epsilons) == 1:
        overrides["epsilon"] = epsilons[0]
    elif "epsilon" in fields and len(epsilons) > 1:
        notes.append(f"the rollouts record several trainer epsilons ({epsilons}); pass --set epsilon=...")
    if "norm_by_std" in fields and len(scales) == 1 and scales[0] in _DIVIDES:
        overrides["norm_by_std"] = _DIVIDES[scales[0]]
        if scales[0] == "batch":
            notes.append(
                "the trainer divided by the batch's std (scale_rewards='batch'); the recomputation divides "
                "by the group's, so a gap remains"
            )
    elif "norm_by_std" in fields and len(scales) > 1:
        notes.append(f"the rollouts record several scale_rewards ({scales}); pass --set norm_by_std=...")
    return overrides, notes
