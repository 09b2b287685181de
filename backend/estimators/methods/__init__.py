"""The estimators, one module per family (docs/estimators.md); the machinery they share
(registry, config bases, reductions, fitting, value sources, explanations) is the package above."""
