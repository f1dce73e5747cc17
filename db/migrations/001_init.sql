-- 001: the tuning database. Every measurement is kept; a result is reusable
-- only where its whole key matches (device, compiler, template hash, params,
-- problem), so each of those is a row of its own.
CREATE TABLE devices (
  id            INTEGER PRIMARY KEY,
  backend       TEXT NOT NULL,          -- cpu | cuda | hip
  arch          TEXT NOT NULL,          -- x86-64-v4, sm_90, gfx942:sramecc+:xnack-
  name          TEXT NOT NULL,
  compute_units INTEGER NOT NULL,       -- cores, SMs or CUs
  mem_bytes     INTEGER NOT NULL,
  driver        TEXT NOT NULL,          -- driver / runtime version
  first_seen    TEXT NOT NULL DEFAULT (datetime('now')),
  UNIQUE (backend, arch, name, compute_units, mem_bytes, driver)
);
CREATE TABLE compilers (
  id      INTEGER PRIMARY KEY,
  driver  TEXT NOT NULL,                -- cc | nvrtc | comgr | clang
  version TEXT NOT NULL,
  flags   TEXT NOT NULL,
  UNIQUE (driver, version, flags)
);
CREATE TABLE problems (
  id       INTEGER PRIMARY KEY,
  key      TEXT NOT NULL UNIQUE,        -- canonical text, e.g. "gemm f16:f16:f16 m=1 n=1024 k=1024"
  op       TEXT NOT NULL,
  ta TEXT NOT NULL, tb TEXT NOT NULL, tc TEXT NOT NULL,
  m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL,
  layout   TEXT NOT NULL DEFAULT 'row-major, B as [N,K]',
  epilogue TEXT NOT NULL DEFAULT ''
);
CREATE TABLE variants (
  id            INTEGER PRIMARY KEY,
  vid           TEXT NOT NULL UNIQUE,   -- hash(template source, params, dtypes, target, compiler)
  template      TEXT NOT NULL,
  template_hash TEXT NOT NULL,
  params        TEXT NOT NULL,          -- canonical "A=1,B=2" in declaration order
  dtypes        TEXT NOT NULL,
  target        TEXT NOT NULL,
  compiler_id   INTEGER NOT NULL REFERENCES compilers(id),
  code_bytes    INTEGER,                -- resource usage where the driver reports it
  regs          INTEGER,
  spills        INTEGER,
  shared_bytes  INTEGER,
  scratch_bytes INTEGER
);
CREATE TABLE measurements (
  id         INTEGER PRIMARY KEY,
  device_id  INTEGER NOT NULL REFERENCES devices(id),
  problem_id INTEGER NOT NULL REFERENCES problems(id),
  variant_id INTEGER NOT NULL REFERENCES variants(id),
  status     TEXT NOT NULL CHECK (status IN ('ok', 'compile-failed', 'rejected',
             'verify-failed', 'launch-failed', 'timed-out')),
  detail     TEXT,                      -- why it failed, or null
  median_us  REAL, min_us REAL, max_us REAL,
  spread     REAL,                      -- interquartile range / median
  iters      INTEGER,
  tflops     REAL, gbps REAL,
  max_err    REAL,                      -- worst |err| / tolerance over all elements
  created    TEXT NOT NULL DEFAULT (datetime('now')),
  UNIQUE (device_id, problem_id, variant_id)
);
CREATE TABLE winners (
  device_id      INTEGER NOT NULL REFERENCES devices(id),
  problem_id     INTEGER NOT NULL REFERENCES problems(id),
  target         TEXT NOT NULL,         -- the variants' target: one device may serve several
  measurement_id INTEGER NOT NULL REFERENCES measurements(id),
  runner_up_id   INTEGER REFERENCES measurements(id),
  margin         REAL,                  -- (runner-up median - winner median) / winner median
  chosen         TEXT NOT NULL DEFAULT (datetime('now')),
  PRIMARY KEY (device_id, problem_id, target)
);
