-- Idempotence by content: each imported record carries a 64-bit key of (file name, position in the
-- file, record content), so a record reached again by any path (a directory, a subdirectory, one
-- file of it, the same directory after it grew) is recognised and skipped. NULL for rows stored
-- before this migration and for records imported without a key.
ALTER TABLE rollouts ADD COLUMN record_key BIGINT;
