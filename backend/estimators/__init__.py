"""Credit estimators (the math: docs/estimators.md). Importing this package registers them all.

Every estimator is `fn(batch, config) -> EstimatorResult`, registered by name in `registry`, the only list
of names; each has a slow loop twin registered by the same name in `twins/`, which the tests compare it with.

Adding an estimator:
1. Write it in the module of its family in `methods/` (outcome, credit, valued, learned, logged, modifiers; a
new family
   gets a new module, imported below): a frozen config subclassing `registry.Config` (or a family base such
   as `common.OutcomeConfig`/`CreditConfig`) whose fields use `param(default, help=..., low=, high=)`, and
   the function under `@register("name", Config, "one line", needs=..., family=..., source=...,
   explain=fn)`. `source` names the paper and the official code (with its commit) it was checked against;
   leave it empty for a construction of our own and describe it honestly. `explain` is its derivation of
   A_t from its diagnostics (what `creditlens explain --pos` and the Rollout view print), written beside it
   from the shared steps of `explaining.py` (Z from the outcome, broadcast, ...) plus its own formula.
2. Write its twin in `twins/<family>.py` under `@twin("name")`: `fn(batch, config) -> advantages (B, T)`,
   plain python loops over responses and real tokens (helpers in `twins/loops.py`), written from the
   formula and never calling the vectorized code it checks. Without a twin, `reference_advantages` fails
   with "no twin for 'name'" and `loop_twins.missing_twins()` lists it.
3. Tests: tests/backend/estimators/test_twins.py picks up every registered name on its own (seeded
   random batches and hypothesis-drawn ones); add a row to its VARIANTS for each config branch (a mode,
   a value source).
   A paper-named estimator also gets an entry in test_official.py against the official code's outputs.
4. Document the math, its source and its scope in docs/estimators.md.
An estimator that reads scores only the policy can make (OAR, GCPO: `needs=model_score_needs("name")`)
also registers its score producer with `@produces("name", ...)` in backend/models/score_producers.py (the
model-bound half, run by `creditlens model-credit --method name`) and adds the name to
`batch_fields.MODEL_SCORED`; tests/test_architecture.py fails until both agree.
"""

from backend.estimators.methods import (  # noqa: F401  (registers)
    as_trained,
    blocks,
    credit,
    entropy_methods,
    learned,
    learned_ktae,
    logged,
    model_based,
    modifiers,
    outcome,
    trace_methods,
    turn_methods,
    valued,
)
