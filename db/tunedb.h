/* tunedb.h — the tuning database (tune.db, SQLite): devices, compilers,
 * problems, variants, every measurement, and the winner per (device,
 * problem). Opening a database applies the schema migrations it lacks. */
#ifndef GC_TUNEDB_H
#define GC_TUNEDB_H

#include "../core/problem.h"
#include "../core/resources.h"

typedef struct gc_db gc_db_t;

typedef struct gc_db_device {
  const char *backend, *arch, *name, *driver;
  int64_t compute_units, mem_bytes;
} gc_db_device_t;

typedef struct gc_db_variant {
  const char *vid, *template_name, *template_hash, *params, *dtypes, *target;
  int64_t compiler_id;
} gc_db_variant_t;


typedef struct gc_db_measurement {
  int64_t device_id, problem_id, variant_id;
  const char *status; /* ok | compile-failed | rejected | verify-failed | launch-failed | timed-out */
  const char *detail; /* may be NULL */
  double median_us, min_us, max_us, spread, tflops, gbps, max_err;
  int64_t iters;
} gc_db_measurement_t;

/* A winner as gcore-gen needs it. Strings are owned by the struct. */
typedef struct gc_db_winner {
  int64_t measurement_id;
  char vid[64], template_name[64], template_hash[64], params[512];
  char compiler[160];
  double median_us, margin;
  int step_lost;                 /* gcore-tune's step check (the latest of this measurement):
                                    the decode step was not faster with it than with the
                                    template default, whose times follow (µs a step) */
  double step_default_us, step_winner_us;
  int step_rows;                 /* the step those times are of: 0 gcore-run's single-sequence
                                    step, M the batched step of M rows, -1 unrecorded (before
                                    schema 007) */
} gc_db_winner_t;

/* Open (create when create != 0) and migrate. A file that is not an SQLite
 * database, is truncated, or has a schema newer than this gcore → error. */
int gc_db_open(const char *path, int create, gc_db_t **out, gc_err_t *e);
void gc_db_close(gc_db_t *db);
int gc_db_schema_version(gc_db_t *db);
int gc_db_latest_version(void);

/* A write transaction (BEGIN IMMEDIATE: taken at once, waiting for
 * another process's to end, so that what it reads stays true until it
 * commits). */
int gc_db_begin(gc_db_t *db, gc_err_t *e);
int gc_db_commit(gc_db_t *db, gc_err_t *e);
int gc_db_rollback(gc_db_t *db);

/* Upserts returning the row id. */
int gc_db_device_id(gc_db_t *db, const gc_db_device_t *d, int64_t *id, gc_err_t *e);
int gc_db_compiler_id(gc_db_t *db, const char *driver, const char *version,
                      const char *flags, int64_t *id, gc_err_t *e);
int gc_db_problem_id(gc_db_t *db, const gc_problem_t *p, int64_t *id, gc_err_t *e);
int gc_db_variant_id(gc_db_t *db, const gc_db_variant_t *v, int64_t *id, gc_err_t *e);
int gc_db_set_resources(gc_db_t *db, int64_t variant_id,
                        const gc_resources_t *r, gc_err_t *e);

/* How the detail of a rejection by a template constraint (or @applies)
 * begins: such a candidate was never one, so it counts toward no budget
 * (gc_db_measured, gc_db_candidates). */
#define GC_DB_CONSTRAINT_DETAIL "constraint failed"

/* *found = 1 when a measurement for (device, problem, variant) exists, 2
 * when it is a rejection by a template constraint (never a candidate), 0
 * when none does. */
int gc_db_measured(gc_db_t *db, int64_t device_id, int64_t problem_id,
                   int64_t variant_id, int *found, gc_err_t *e);
/* Record a measurement and release its claim. A measurement already
 * recorded for (device, problem, variant) is kept, never replaced. */
int gc_db_record(gc_db_t *db, const gc_db_measurement_t *m, gc_err_t *e);

/* Several processes may tune one database at once. Inside a transaction
 * (gc_db_begin) in which gc_db_measured found (device, problem, variant)
 * unmeasured, gc_db_claim takes it for this process: *got = 1 when it is
 * now this process's to measure, 0 when another process that may still be
 * running holds it. A claim of a process that has ended on this host is
 * retaken; one from another host after GC_DB_CLAIM_MAX_AGE seconds.
 * gc_db_record releases a claim; gc_db_release_claims drops every claim of
 * this process (a sweep cut short). */
#define GC_DB_CLAIM_MAX_AGE (24 * 3600.0)
int gc_db_claim(gc_db_t *db, int64_t device_id, int64_t problem_id, int64_t variant_id,
                int *got, gc_err_t *e);
int gc_db_release_claims(gc_db_t *db, gc_err_t *e);
/* *n = the claims on (device, problem) that other live processes hold. */
int gc_db_claims_held(gc_db_t *db, int64_t device_id, int64_t problem_id, int64_t *n,
                      gc_err_t *e);

/* Choose the winner of (device, problem) among 'ok' measurements: the lowest
 * median, except that an incumbent within the noise margin (max(margin,
 * spread of the two)) keeps its place so that reruns do not flip winners.
 * Only variants of the template versions in template_hashes (",h1,...,")
 * compete, so a winner never names code its template no longer builds;
 * NULL: all versions. *found = 0 when nothing verified exists. */
int gc_db_pick_winner(gc_db_t *db, int64_t device_id, int64_t problem_id,
                      const char *target, const char *template_hashes, double margin,
                      int *found, gc_err_t *e);

/* The winner for problem p among variants built for target, on any device
 * (newest choice first), with what the step check last said of it
 * (step_lost). */
int gc_db_find_winner(gc_db_t *db, const char *target, const gc_problem_t *p,
                      gc_db_winner_t *w, int *found, gc_err_t *e);

/* Record gcore-tune's step check of the winner measurement_id on target:
 * the decode step of model (its path) of rows rows (0: the single
 * sequence's step; M: the batched step of M rows) took default_us with
 * the template default and winner_us with the winner in its place; kept
 * 0: gcore-gen uses the default (gc_db_winner_t.step_lost). */
int gc_db_record_step_check(gc_db_t *db, int64_t measurement_id, const char *target, const char *model,
                            int rows, double default_us, double winner_us, int kept, gc_err_t *e);

/* The step a step check's times are of, for a message: "the single
 * sequence's step" (rows 0), "the step of a batch of M" (rows M), "the
 * decode step" (-1: unrecorded). Returns out. */
const char *gc_db_step_name(int rows, char *out, size_t n);

/* Append to out every problem that has a winner for target (any device). */
int gc_db_tuned_problems(gc_db_t *db, const char *target, gc_problems_t *out, gc_err_t *e);

/* Median of the measurement of a given variant on (device, problem), or
 * *found = 0. Used to report what the winner gained over the default. */
int gc_db_variant_median(gc_db_t *db, int64_t device_id, int64_t problem_id,
                         const char *vid, double *median_us, int *found,
                         gc_err_t *e);

/* *n = the candidates already measured for (device, problem) among the
 * variants of target built by compiler_id from the template versions in
 * template_hashes (",h1,h2,...,": an edited template's old measurements
 * do not count): every status but a rejection by a template constraint. */
int gc_db_candidates(gc_db_t *db, int64_t device_id, int64_t problem_id, const char *target,
                     int64_t compiler_id, const char *template_hashes, int64_t *n, gc_err_t *e);

/* ---- the confirmation of a sweep's finalists (tuner/tune.c) ---------- */

typedef struct gc_db_finalist {
  int64_t measurement_id, variant_id;
  char vid[64], template_name[64], params[512];
  double median_us;
} gc_db_finalist_t;

/* Up to n verified measurements of (device, problem) among the variants of
 * target built by compiler_id from template_hashes: the variant vid's first
 * when it is one of them (the bundle's default; NULL: none), then the
 * fastest others. *got = how many were written to out[0 .. n). */
int gc_db_finalists(gc_db_t *db, int64_t device_id, int64_t problem_id, const char *target,
                    int64_t compiler_id, const char *template_hashes, const char *vid,
                    gc_db_finalist_t *out, int n, int *got, gc_err_t *e);

/* A second run of measurement measurement_id's variant (m: its result, the
 * ids unused). ok: the measurement takes m's times when m's median is the
 * lower (a transient load on the device can only have slowed a run), and
 * the larger of the two verification errors; any other status replaces
 * the measurement's (times cleared, detail m->detail), so that a variant
 * that fails when run again can no longer win. */
int gc_db_retime(gc_db_t *db, int64_t measurement_id, const gc_db_measurement_t *m, gc_err_t *e);

/* Status counts over (device, problem): fills counts for the 6 statuses in
 * the order listed for gc_db_measurement_t.status. */
int gc_db_status_counts(gc_db_t *db, int64_t device_id, int64_t problem_id,
                        int64_t counts[6], gc_err_t *e);
extern const char *const gc_db_statuses[6];

/* ---- a whole database in memory (reports) ------------------------------ */

typedef struct gc_db_dev_row {
  int64_t id, compute_units, mem_bytes;
  char backend[16], arch[96], name[160], driver[128];
} gc_db_dev_row_t;

typedef struct gc_db_prob_row {
  int64_t id;
  char key[GC_PROBLEM_KEY];
  gc_problem_t p; /* valid where parsed */
  int parsed;     /* 0: a row this gcore does not read as a problem (an op
                     or dtype of another version): shown by its key only */
} gc_db_prob_row_t;

/* A measurement with its variant. Reals that are NULL in the file (the
 * timings of a failed candidate) are NAN. */
typedef struct gc_db_meas_row {
  int64_t id, device_id, problem_id, variant_id, iters;
  char target[64], template_name[64], template_hash[48], params[512], vid[48];
  char status[16], detail[401]; /* detail: its first 400 bytes, "" if none */
  double median_us, min_us, max_us, spread, tflops, gbps, max_err;
} gc_db_meas_row_t;

typedef struct gc_db_win_row {
  int64_t device_id, problem_id, measurement_id, runner_up_id; /* runner_up_id 0: none */
  char target[64];
  double margin; /* NAN without a runner-up */
  int step_checked, step_kept;            /* the latest step check of the winner, if any */
  double step_default_us, step_winner_us; /* its µs a step (NAN: none) */
  int step_rows;                          /* ... of this step (gc_db_winner_t.step_rows) */
} gc_db_win_row_t;

typedef struct gc_db_dump {
  gc_db_dev_row_t *devs;   /* by id */
  gc_db_prob_row_t *probs; /* by op, dtypes, then sizes in numeric order */
  gc_db_meas_row_t *meas;  /* by device, target, problem, then fastest first
                              (failed ones last) */
  gc_db_win_row_t *wins;   /* by device, target, problem */
  int64_t ndevs, nprobs, nmeas, nwins;
  int64_t cap_devs, cap_probs, cap_meas, cap_wins;
} gc_db_dump_t;

/* Read every device, problem, measurement (with its variant) and winner of
 * db. Strings from the file are cut to their fields, never trusted to be
 * text of any kind: escape them where they are shown. Release with
 * gc_db_dump_free (also after an error, which leaves d empty). */
int gc_db_dump(gc_db_t *db, gc_db_dump_t *d, gc_err_t *e);
void gc_db_dump_free(gc_db_dump_t *d);

/* ---- merging databases of several machines ------------------------------ */

typedef struct gc_db_merge_stats {
  int64_t measurements, added; /* rows the source holds; of them new here */
  int64_t devices, compilers, problems, variants; /* rows new here */
  int64_t step_checks;                            /* ... and step checks new here */
} gc_db_merge_stats_t;

/* Copy into db (inside the caller's write transaction, gc_db_begin) every
 * device, compiler, problem, variant, measurement and step check of the database at
 * src_path, opened read-only (it must have this gcore's schema). Rows are
 * matched by their keys, not their ids: devices by (backend, arch, name,
 * compute units, memory, driver), compilers by (driver, version, flags),
 * problems by key, variants by vid, measurements by (device, problem,
 * variant), step checks by all their columns (the measurement's id
 * mapped). A measurement db already holds is kept and the source's
 * dropped, so merging a database twice adds nothing. A source winner is
 * copied where db has none for its (device, problem, target); every such
 * key the source touches is remembered for gc_db_merge_repick. src_path
 * naming db's own file is refused. Errors: GC_ENOTFOUND, GC_ECORRUPT,
 * GC_EUNSUPPORTED (another schema), GC_EINVAL, GC_EIO, GC_ENOMEM. */
int gc_db_merge_from(gc_db_t *db, const char *src_path, gc_db_merge_stats_t *st, gc_err_t *e);

/* Re-pick the winner of every (device, problem, target) the merges since
 * the handle was opened touched, as gc_db_pick_winner picks (an incumbent
 * within the noise margin keeps its place; only template versions in
 * template_hashes compete). *picked: keys with a winner after it; *changed:
 * of them, those whose winner is not the one before. */
int gc_db_merge_repick(gc_db_t *db, const char *template_hashes, double margin, int64_t *picked,
                       int64_t *changed, gc_err_t *e);

#endif
