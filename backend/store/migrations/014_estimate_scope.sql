-- A run that grows keeps what its new step does not change (a live run): each cached estimator output
-- records the scope it was computed at (step, group or run: registry.SCOPES). An import that appends to a
-- run then drops only the outputs of the steps and groups its rollouts join, and every output of a
-- run-scoped estimator; rows made before (scope NULL) count as run-scoped.
ALTER TABLE estimates ADD COLUMN scope VARCHAR;
