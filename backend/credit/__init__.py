"""Credit at scope: a run's estimates (computed, streamed, cached), its reward channels, the main
channel, token classes and the per-rollout credit summaries."""
