-- Suffixes drawn by the Monte Carlo teacher job (`creditlens teacher`) are marked job = 'teacher', so a
-- rerun knows which rollouts are done; ad-hoc resampling leaves it NULL. Both feed V̂(s_t).
ALTER TABLE resample_samples ADD COLUMN job VARCHAR;
