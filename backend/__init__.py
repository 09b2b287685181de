"""Credit Lens engine: everything but the app. Never imports Streamlit or `app`.

The packages, from the bottom up (tests/test_architecture.py, BACKEND_LAYERS: a package imports only
packages of lower layers):

    core/         errors, the padded rollout batch and its field names, chunk plans, ranks
    store/        the DuckDB store: migrations, every SQL query, which checkpoint sampled each step
    estimators/   the credit estimators: methods/ (one module per family) on their machinery (registry,
                  config bases, reductions, fitting, value sources, explanations); twins/ for the tests
    rewards/      verifiers and step verifiers (the process channel)
    ingest/       the importers, one spec per format (ingest/formats.py)
    models/       the policy model's jobs: engines, suffix resampling, the teacher, model scores
    credit/       credit at scope: a run's estimates (computed, streamed, cached), reward channels and β,
                  the main channel, token classes, per-rollout credit summaries
    views/        the numbers the views and their commands show: derivations, strips, the display tree,
                  the run explorer
    evaluation/   is the credit right? the synthetic oracle, the Monte Carlo teacher's bench, their metrics
    monitor/      credit-health monitors over a run's steps
    demo/         the bundled sample runs: how they are made (train, sample) and imported
    cli/          the commands (`creditlens ...`), the top floor
"""

import os

# OpenMP threads (torch's on the CPU) that finish a parallel region sleep at once instead of spinning for
# more work. A streamed estimate runs torch beside a reader thread, a writer thread and DuckDB's, and the
# spinning took their cores: 1-2 CPU s of a 10 s estimate, wall time 4-12% lower without it, and never
# slower on the runs measured (docs/benchmarks.md, "Workers and Ray"). Set before torch is imported; a
# value the user set wins. ENV_SET_HERE: what this package set (a bench's baseline checkout runs without it).
ENV_SET_HERE: tuple[str, ...] = ()
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    ENV_SET_HERE = ("OMP_WAIT_POLICY",)
