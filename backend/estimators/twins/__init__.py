"""Slow twins: a plain-loop version of every registered estimator, registered with `loop_twins.twin`.

One module per estimator family, mirroring backend/estimators/ (outcome, credit, valued, learned, logged,
modifiers), plus the loop versions of the shared pieces (loops, common, values, tree, features) and of
verl's own GRPO/GAE functions (verl). Each twin is written from docs/estimators.md with python lists and
explicit loops over responses, tokens, groups and folds, and never calls the vectorized function it checks;
tests compare `registry.estimate(name, ...)` with `reference_advantages(name, ...)` (reference.py).
Nothing here is fast; do not call it on real batches. Importing this package registers every twin.
"""

from backend.estimators.twins import (  # noqa: F401  (registers)
    as_trained,
    blocks,
    credit,
    entropy_methods,
    learned,
    logged,
    model_based,
    modifiers,
    outcome,
    trace_methods,
    turn_methods,
    valued,
)
