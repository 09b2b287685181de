-- Signed credit by token class: per rollout, the positive credit Σ max(A, 0) and the negative credit
-- Σ max(−A, 0) on each class (entries in `classes` order), so the Explorer shows where the positive and
-- where the negative credit lands, not only where |A| does. Old rows lack them: they are dropped (a credit
-- summary is a cache of the estimates; the Explorer refills it from the cached advantages).
ALTER TABLE credit_summary ADD COLUMN class_pos DOUBLE[];
ALTER TABLE credit_summary ADD COLUMN class_neg DOUBLE[];
DELETE FROM credit_summary;
