-- The credit-health monitors read per-rollout summaries only (docs/monitors.md, "Measured").
-- garbled: the share of the response's characters that are control or replacement characters or lie in a
-- word mixing Latin with another script (explorer_queries.GARBLED_SQL), computed with the rest of the
-- summary instead of one regular-expression scan of every response per monitor call. Old rows lack it:
-- they are dropped (a summary is a cache of the rollouts; every view refills it before reading).
ALTER TABLE rollout_summary ADD COLUMN garbled DOUBLE;
DELETE FROM rollout_summary;
-- channel_summary: per rollout, Σ_t |β_c·Ã_c| of each channel c (`part`, `part_index` its place in the
-- split-channel credit) with the estimator (estimator, config_hash) on `channel`, computed over the first
-- `groups_per_step` groups of each step (0: all), what the channel_takeover monitor reads. An estimate
-- cache: dropped with the run's estimates whenever its inputs change.
CREATE TABLE channel_summary (
    run_id          INTEGER NOT NULL,
    estimator       VARCHAR NOT NULL,
    config_hash     VARCHAR NOT NULL,
    channel         VARCHAR NOT NULL,
    groups_per_step INTEGER NOT NULL,
    rollout_id      INTEGER NOT NULL,
    part_index      INTEGER NOT NULL,
    part            VARCHAR NOT NULL,
    magnitude       DOUBLE NOT NULL
);
