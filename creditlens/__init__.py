"""Credit Lens from Python: the store, its runs, their rollouts and credit as DataFrames, for notebooks.

    import creditlens
    lens = creditlens.open("~/.creditlens/runs.duckdb")
    lens.runs()                                  # one row per run (`creditlens runs --json`)
    run = lens.run("demo")
    run.rollouts(estimator="grpo", sort="-max_abs", limit=10)   # the Explorer's table
    run.estimate("grpo", channel="all", epsilon=1e-4)                   # token rows (`creditlens estimate`)
    run.explain(3, "terminal_gae", pos=5)                                # `creditlens explain --json`
    run.trends()                                                         # Trends (`creditlens trends`)
    run.monitor()                                       # credit-health alerts (`creditlens monitor --json`)

Names only: every method calls the function that the command line and the views call (backend/), so a
notebook, a command and a view can never disagree. See docs/python.md.
"""

from creditlens.api import Lens, Run, open

__all__ = ["Lens", "Run", "open"]
