-- Per-rollout metrics: numbers a trainer logs beside the reward that are not rewards (verl's
-- reward_extra_info such as `acc`, TRL's numeric `log_extra` columns, a native record's `metrics`).
-- They are never summed into a channel; the Explorer shows each as a `metric_<name>` column and Trends
-- charts its mean per step. One row per rollout and metric; a rollout without a value has no row.
CREATE TABLE rollout_metrics (
    run_id     INTEGER NOT NULL,
    rollout_id INTEGER NOT NULL,
    name       VARCHAR NOT NULL,
    value      DOUBLE NOT NULL
);
