/* report.h — a tuning database as one self-contained HTML page with inline
 * SVG plots (no script, no style sheet or font from elsewhere: it opens
 * offline): per device and target, a table of the winners, every
 * candidate's time per problem with the winner and the template default
 * marked and the failures counted by status, and time against each value
 * of every template parameter. */
#ifndef GC_REPORT_H
#define GC_REPORT_H

#include "../db/tunedb.h"

typedef struct gc_report_stats {
  int64_t devices, problems, measurements, plots;
} gc_report_stats_t;

/* The page for db into out (appended). db_label names the database in the
 * page (its path). Templates (from templates_dir, or the embedded ones
 * when NULL) say which candidate is each problem's template default; where
 * they cannot be loaded the page marks none. Every string from the
 * database is escaped: the file is untrusted. Errors: GC_ENOMEM, and the
 * database's read errors. */
int gc_report_html(gc_db_t *db, const char *db_label, const char *templates_dir, gc_buf_t *out,
                   gc_report_stats_t *st, gc_err_t *e);

/* Open the database at db_path read-only and write its page to out_path
 * (a regular file or nothing, replaced atomically). */
int gc_report_write(const char *db_path, const char *templates_dir, const char *out_path,
                    gc_report_stats_t *st, gc_err_t *e);

/* Published peak figures of a device, by its name (dense matrix math):
 * bandwidth in GB/s, 16-bit and 32-bit TFLOP/s. 0 when gcore knows none. */
typedef struct gc_report_peak {
  const char *name; /* the substring of the device name it matched */
  double gbps, tflops16, tflops32;
} gc_report_peak_t;
int gc_report_peak(const char *device_name, gc_report_peak_t *out);

#endif
