"""Benchmarks: `python -m bench <name>` (ingest, estimators, models, oracle, app, all)."""
