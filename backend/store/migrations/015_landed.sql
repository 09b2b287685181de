-- Did the credit land: the policy after each step's update. `step_after_checkpoints` names, per step, the
-- checkpoint of the weights once the optimizer step(s) that consumed the step's batch were done (the TRL
-- recorder's `meta.checkpoint_after`, resolved at import); `landed_logprobs` caches the rollouts' tokens
-- scored under it by `creditlens landed` (the checkpoint route; the recorder's own `logprobs_after` is
-- the token feature of that name). `model_dir` is absolute, like step_checkpoints.model_dir.
CREATE TABLE step_after_checkpoints (
    run_id    INTEGER NOT NULL,
    step      INTEGER NOT NULL,
    model_dir VARCHAR NOT NULL,
    attached  TIMESTAMP DEFAULT current_timestamp
);
CREATE TABLE landed_logprobs (
    run_id     INTEGER NOT NULL,
    rollout_id INTEGER NOT NULL,
    model_dir  VARCHAR NOT NULL,
    logprobs   FLOAT[] NOT NULL,
    created    TIMESTAMP DEFAULT current_timestamp
);
