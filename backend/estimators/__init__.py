"""Credit estimators (ESTIMATORS.md sections 1-7). Importing this package registers them all.

Add an estimator by writing a module here that uses `registry.register` and importing it below.
"""

from backend.estimators import credit, learned, logged, model_based, modifiers, outcome, valued  # noqa: F401  (registers)
