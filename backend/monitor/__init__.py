"""Credit-health monitors over a run's steps (`creditlens monitor`, the Trends alerts)."""
