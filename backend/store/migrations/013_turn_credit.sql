-- Credit by turn in the Explorer: per rollout of an agent run, Σ|A| on each of the policy's
-- (assistant) turns in order (`turn_abs`) and on the assistant turns a tool's or environment's turn follows
-- (`call_abs`, the turns that called a tool); NULL on a run without turns. An agent run's summaries made
-- before lack them: they are dropped (a cache; the Explorer refills it from the cached advantages).
ALTER TABLE credit_summary ADD COLUMN turn_abs DOUBLE[];
ALTER TABLE credit_summary ADD COLUMN call_abs DOUBLE;
DELETE FROM credit_summary WHERE run_id IN (SELECT DISTINCT run_id FROM rollouts WHERE turns IS NOT NULL);
