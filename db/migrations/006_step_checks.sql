-- 006: gcore-tune --model's step check. A winner is timed alone, but a
-- decode step runs its kernels overlapped (PDL) and side by side on the
-- SMs, so a kernel faster alone can make the step slower (a larger ring
-- that its neighbour no longer fits beside). The check times the model's
-- decode step with each winner against the template default in its place;
-- a row per winner checked (its measurement), and where the step was not
-- faster with it (kept = 0) gcore-gen uses the default.
CREATE TABLE step_checks (
  id             INTEGER PRIMARY KEY,
  measurement_id INTEGER NOT NULL REFERENCES measurements(id), -- the winner checked
  target         TEXT NOT NULL,
  model          TEXT NOT NULL,    -- the model whose decode step was timed
  default_us     REAL NOT NULL,    -- the step with the template default
  winner_us      REAL NOT NULL,    -- ... with the winner in its place
  kept           INTEGER NOT NULL CHECK (kept IN (0, 1)),
  created        TEXT NOT NULL DEFAULT (datetime('now'))
);
CREATE INDEX step_checks_measurement ON step_checks(measurement_id);
