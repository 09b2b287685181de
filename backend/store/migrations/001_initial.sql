-- Credit Lens store, version 1.
-- Per-token arrays live as LIST columns on one row per rollout (kept in rollout order): fetching a
-- rollout reads one row, and Arrow list arrays go in and out without exploding to a token table.
CREATE TABLE runs (
    run_id      INTEGER PRIMARY KEY,
    name        VARCHAR NOT NULL UNIQUE,
    source      VARCHAR,
    model_dir   VARCHAR,
    tokenizer   VARCHAR,
    verifier    VARCHAR,
    created     TIMESTAMP DEFAULT current_timestamp,
    meta        JSON
);
CREATE TABLE imports (
    run_id      INTEGER NOT NULL,
    file_hash   VARCHAR NOT NULL,
    path        VARCHAR,
    format      VARCHAR,
    records     BIGINT,
    tokens      BIGINT,
    imported_at TIMESTAMP DEFAULT current_timestamp
);
CREATE TABLE groups (
    run_id       INTEGER NOT NULL,
    group_id     INTEGER NOT NULL,
    group_key    VARCHAR NOT NULL,
    step         INTEGER,
    prompt       VARCHAR,
    ground_truth VARCHAR
);
CREATE TABLE rollouts (
    run_id           INTEGER NOT NULL,
    rollout_id       INTEGER NOT NULL,
    group_id         INTEGER NOT NULL,
    step             INTEGER NOT NULL,
    prompt           VARCHAR,
    response         VARCHAR,
    prompt_ids       INTEGER[],
    token_ids        INTEGER[] NOT NULL,
    tokens           VARCHAR[],
    logprobs         FLOAT[],
    ref_logprobs     FLOAT[],
    entropies        FLOAT[],
    "values"         FLOAT[],
    logged_advantage DOUBLE,
    meta             JSON
);
CREATE TABLE scores (
    run_id     INTEGER NOT NULL,
    rollout_id INTEGER NOT NULL,
    channel    VARCHAR NOT NULL,
    score      DOUBLE NOT NULL
);
CREATE TABLE token_rewards (
    run_id     INTEGER NOT NULL,
    rollout_id INTEGER NOT NULL,
    channel    VARCHAR NOT NULL,
    rewards    FLOAT[] NOT NULL
);
-- Per-token features beyond the standard fields (synthetic runs: true credit, key mask, ...).
CREATE TABLE token_features (
    run_id     INTEGER NOT NULL,
    rollout_id INTEGER NOT NULL,
    name       VARCHAR NOT NULL,
    vals       FLOAT[] NOT NULL
);
CREATE TABLE estimates (
    run_id      INTEGER NOT NULL,
    estimator   VARCHAR NOT NULL,
    config_hash VARCHAR NOT NULL,
    config      JSON,
    channel     VARCHAR NOT NULL,
    rollout_id  INTEGER NOT NULL,
    advantages  FLOAT[] NOT NULL,
    created     TIMESTAMP DEFAULT current_timestamp
);
CREATE TABLE resample_samples (
    run_id      INTEGER NOT NULL,
    rollout_id  INTEGER NOT NULL,
    pos         INTEGER NOT NULL,
    sample_idx  INTEGER NOT NULL,
    seed        BIGINT,
    suffix_ids  INTEGER[],
    suffix_text VARCHAR,
    reward      DOUBLE,
    engine      VARCHAR,
    model       VARCHAR,
    created     TIMESTAMP DEFAULT current_timestamp
);
