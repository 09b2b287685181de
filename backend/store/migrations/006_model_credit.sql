-- Per-token scores of the model-based credit methods (`creditlens model-credit`): OAR-P and OAR-G
-- (each reasoning token's influence on the final answer) and GCPO (log-prob contrast under a negative
-- prompt). One row per rollout and method; `scores` is NaN on the tokens a method does not score.
-- `settings` (JSON) records what the scores depend on beyond the model (answer regex, prompt template).
CREATE TABLE model_credit (
    run_id     INTEGER NOT NULL,
    rollout_id INTEGER NOT NULL,
    method     VARCHAR NOT NULL,
    scores     FLOAT[] NOT NULL,
    settings   JSON,
    model      VARCHAR,
    engine     VARCHAR,
    created    TIMESTAMP DEFAULT current_timestamp
);
