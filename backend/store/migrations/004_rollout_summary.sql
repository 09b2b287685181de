-- The Explorer's per-rollout numbers, computed where the data is so that no view loads a run into Python.
-- rollout_summary: one row per rollout, rebuilt by SQL over `rollouts`/`scores` whenever a run is
-- imported or appended to (zero-variance flags change when a group grows).
CREATE TABLE rollout_summary (
    run_id           INTEGER NOT NULL,
    rollout_id       INTEGER NOT NULL,
    group_id         INTEGER NOT NULL,
    step             INTEGER NOT NULL,
    length           INTEGER NOT NULL,
    reward           DOUBLE,
    zero_variance    BOOLEAN,
    truncated        BOOLEAN,
    repetition       DOUBLE,
    mean_entropy     DOUBLE,
    kl               DOUBLE,
    logged_advantage DOUBLE
);
-- credit_summary: per rollout and estimator output (the `estimates` key), the |A| mass on each token
-- class. `classes` names the entries of `class_abs`/`class_tokens`, so a changed class list is a new key.
CREATE TABLE credit_summary (
    run_id       INTEGER NOT NULL,
    estimator    VARCHAR NOT NULL,
    config_hash  VARCHAR NOT NULL,
    channel      VARCHAR NOT NULL,
    classes      VARCHAR[] NOT NULL,
    rollout_id   INTEGER NOT NULL,
    abs_total    DOUBLE NOT NULL,
    max_abs      DOUBLE NOT NULL,
    mean_adv     DOUBLE NOT NULL,
    class_abs    DOUBLE[] NOT NULL,
    class_tokens INTEGER[] NOT NULL
);
-- credit_agreement: per rollout, the Spearman correlation of two estimator outputs over its tokens.
CREATE TABLE credit_agreement (
    run_id      INTEGER NOT NULL,
    estimator_a VARCHAR NOT NULL,
    hash_a      VARCHAR NOT NULL,
    estimator_b VARCHAR NOT NULL,
    hash_b      VARCHAR NOT NULL,
    channel     VARCHAR NOT NULL,
    rollout_id  INTEGER NOT NULL,
    spearman    DOUBLE
);
