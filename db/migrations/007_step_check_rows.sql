-- 007: which decode step a step check's numbers are of. A winner of M
-- rows is timed in gcore-serve's batched step of M rows and, where
-- gcore-gen's bundle also runs it for fewer rows, in the batched step of
-- the fewest of them; the verdict records the step that refused it (or
-- its own, kept). rows: 0, gcore-run's single-sequence step; M > 0, the
-- batched step of M rows; NULL, a verdict recorded before 007.
ALTER TABLE step_checks ADD COLUMN rows INTEGER CHECK (rows IS NULL OR rows >= 0);
