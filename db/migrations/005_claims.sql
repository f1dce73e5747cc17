-- 005: several gcore-tune processes may sweep one database at once. A
-- process claims a candidate in the same transaction that finds it
-- unmeasured, and its measurement releases the claim, so no two processes
-- measure one variant for one (device, problem). owner is "host/boot id"
-- and pid with the process's start time (clock ticks after boot), so that
-- a claim left by a process that has ended (or a reused pid) is retaken.
CREATE TABLE claims (
  device_id  INTEGER NOT NULL REFERENCES devices(id),
  problem_id INTEGER NOT NULL REFERENCES problems(id),
  variant_id INTEGER NOT NULL REFERENCES variants(id),
  owner      TEXT NOT NULL,
  pid        INTEGER NOT NULL,
  pstart     INTEGER NOT NULL,
  claimed    TEXT NOT NULL DEFAULT (datetime('now')),
  PRIMARY KEY (device_id, problem_id, variant_id)
);
