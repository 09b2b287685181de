-- Agent runs (multi-turn): per rollout the tokens the trainer trains (`loss_mask`, NULL: all of them), its
-- turns as token spans by role (`turns`, JSON [{role, start, end}], end exclusive) and the environment's
-- score after each assistant turn (`turn_rewards`, NULL where a turn has none).
ALTER TABLE rollouts ADD COLUMN loss_mask BOOLEAN[];
ALTER TABLE rollouts ADD COLUMN turns JSON;
ALTER TABLE rollouts ADD COLUMN turn_rewards DOUBLE[];
-- The NeMo-RL, prime-rl and TRL importers kept the mask as the per-token feature `loss_mask` (a strip the
-- views drew, which no estimator read): it moves to its column; its turns are its contiguous spans, which
-- the batch loader derives where `turns` is NULL.
UPDATE rollouts SET loss_mask = (
    SELECT list_transform(f.vals, lambda x: x > 0.5) FROM token_features f
    WHERE f.run_id = rollouts.run_id AND f.rollout_id = rollouts.rollout_id AND f.name = 'loss_mask'
);
DELETE FROM token_features WHERE name = 'loss_mask';
