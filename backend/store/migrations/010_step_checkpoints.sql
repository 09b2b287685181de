-- Which checkpoint sampled each training step of a run (`creditlens import --model TEMPLATE|FILE`,
-- `creditlens checkpoints`): the model jobs (teacher, resample, score, model-credit) use the rollout's
-- step checkpoint by default. `model_dir` is absolute, like runs.model_dir.
CREATE TABLE step_checkpoints (
    run_id    INTEGER NOT NULL,
    step      INTEGER NOT NULL,
    model_dir VARCHAR NOT NULL,
    attached  TIMESTAMP DEFAULT current_timestamp
);
-- Whether the suffixes / scores came from the checkpoint that sampled the rollout's step (true), from
-- another model named on purpose (false), or were stored before this was recorded (NULL: unknown).
ALTER TABLE resample_samples ADD COLUMN on_policy BOOLEAN;
ALTER TABLE model_credit ADD COLUMN on_policy BOOLEAN;
