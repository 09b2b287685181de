-- Imports commit chunk by chunk into a hidden staging run (status 'importing') so that memory stays
-- bounded; the last, small transaction publishes it. Readers only ever see runs with status 'ready'.
ALTER TABLE runs ADD COLUMN status VARCHAR DEFAULT 'ready';
