-- The run's main channel: the reward channel (or `all`, the channel scores summed per rollout) that every
-- view and command reads when none is chosen (`--channel`, the views' channel picker), and that the
-- Explorer's zero-variance flag compares. Chosen at import (`creditlens import --main-channel`) and
-- changed with `creditlens main-channel` or on the Runs page. NULL (runs stored before this migration):
-- the default rule of `backend.batch.default_main_channel` (task, else the one channel, else all).
ALTER TABLE runs ADD COLUMN main_channel VARCHAR;
