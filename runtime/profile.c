/* profile.c — per-launch events, reused from a pool, summed per row. */
#include "profile.h"

#include <stdlib.h>
#include <string.h>

typedef struct prof_row {
  char phase[16];
  char kernel[160];
  char key[GC_PROBLEM_KEY];
  int64_t count;
  double ms, flops, bytes;
} prof_row_t;

typedef struct prof_pending {
  gc_event_t *start, *stop;
  int row;
} prof_pending_t;

typedef struct prof_phase {
  char name[16];
  double wall_s;
  int64_t steps;
} prof_phase_t;

struct gc_prof {
  gc_dev_t *dev;
  char phase[16];
  prof_row_t *rows;
  int nrows, caprows;
  prof_pending_t *pend; /* [npend] in use, [npend, cappend) spare events */
  int npend, cappend;
  gc_event_t *open;     /* start event of the launch in progress */
  prof_phase_t phases[8];
  int nphases;
};

int gc_prof_create(gc_dev_t *d, gc_prof_t **out, gc_err_t *e) {
  gc_prof_t *p = gc_calloc(1, sizeof *p, e);
  if (!p) return GC_ENOMEM;
  p->dev = d;
  strcpy(p->phase, "run");
  *out = p;
  return GC_OK;
}

void gc_prof_free(gc_prof_t *p) {
  if (!p) return;
  for (int i = 0; i < p->cappend; i++) {
    gc_dev_event_destroy(p->dev, p->pend[i].start);
    gc_dev_event_destroy(p->dev, p->pend[i].stop);
  }
  free(p->pend);
  free(p->rows);
  free(p);
}

void gc_prof_phase(gc_prof_t *p, const char *phase) {
  snprintf(p->phase, sizeof p->phase, "%s", phase);
}

/* A pending slot with both events created. */
static int slot(gc_prof_t *p, prof_pending_t **out, gc_err_t *e) {
  if (p->npend == p->cappend) {
    int cap = p->cappend ? 2 * p->cappend : 256;
    prof_pending_t *v = gc_realloc(p->pend, (size_t)cap * sizeof *v, e);
    if (!v) return GC_ENOMEM;
    memset(v + p->cappend, 0, (size_t)(cap - p->cappend) * sizeof *v);
    p->pend = v;
    p->cappend = cap;
  }
  prof_pending_t *s = &p->pend[p->npend];
  if ((!s->start && gc_dev_event_create(p->dev, &s->start, e)) ||
      (!s->stop && gc_dev_event_create(p->dev, &s->stop, e)))
    return e->code;
  *out = s;
  return GC_OK;
}

int gc_prof_begin(gc_prof_t *p, gc_err_t *e) {
  prof_pending_t *s = NULL;
  if (slot(p, &s, e) || gc_dev_event_record(p->dev, s->start, e)) return e->code;
  p->open = s->start;
  return GC_OK;
}

static int find_row(gc_prof_t *p, const char *kernel, const char *key, gc_err_t *e) {
  for (int i = 0; i < p->nrows; i++)
    if (!strcmp(p->rows[i].phase, p->phase) && !strcmp(p->rows[i].kernel, kernel) &&
        !strcmp(p->rows[i].key, key))
      return i;
  if (p->nrows == p->caprows) {
    int cap = p->caprows ? 2 * p->caprows : 32;
    prof_row_t *v = gc_realloc(p->rows, (size_t)cap * sizeof *v, e);
    if (!v) return -1;
    p->rows = v;
    p->caprows = cap;
  }
  prof_row_t *r = &p->rows[p->nrows];
  memset(r, 0, sizeof *r);
  snprintf(r->phase, sizeof r->phase, "%s", p->phase);
  snprintf(r->kernel, sizeof r->kernel, "%s", kernel);
  snprintf(r->key, sizeof r->key, "%s", key);
  return p->nrows++;
}

int gc_prof_end(gc_prof_t *p, const char *kernel, const gc_problem_t *pr, double flops,
                double bytes, gc_err_t *e) {
  if (!p->open) return gc_err_set(e, GC_EINVAL, "profile: a launch ended that never began");
  prof_pending_t *s = &p->pend[p->npend];
  char key[GC_PROBLEM_KEY];
  gc_problem_key(pr, key);
  int row = find_row(p, kernel, key, e);
  if (row < 0) return e->code;
  if (gc_dev_event_record(p->dev, s->stop, e)) return e->code;
  s->row = row;
  p->rows[row].count++;
  p->rows[row].flops += flops;
  p->rows[row].bytes += bytes;
  p->npend++;
  p->open = NULL;
  return GC_OK;
}

int64_t gc_prof_count(const gc_prof_t *p, const char *phase, const gc_problem_t *pr) {
  char key[GC_PROBLEM_KEY];
  int64_t n = 0;
  gc_problem_key(pr, key);
  for (int i = 0; i < p->nrows; i++)
    if (!strcmp(p->rows[i].phase, phase) && !strcmp(p->rows[i].key, key)) n += p->rows[i].count;
  return n;
}

static prof_phase_t *phase_of(gc_prof_t *p) {
  for (int i = 0; i < p->nphases; i++)
    if (!strcmp(p->phases[i].name, p->phase)) return &p->phases[i];
  if (p->nphases == (int)GC_ARRAY_LEN(p->phases)) return &p->phases[p->nphases - 1];
  prof_phase_t *ph = &p->phases[p->nphases++];
  snprintf(ph->name, sizeof ph->name, "%s", p->phase);
  return ph;
}

int gc_prof_collect(gc_prof_t *p, double wall_s, gc_err_t *e) {
  for (int i = 0; i < p->npend; i++) {
    double ms;
    if (gc_dev_event_elapsed(p->dev, p->pend[i].start, p->pend[i].stop, &ms, e))
      return gc_err_prefix(e, "profile");
    p->rows[p->pend[i].row].ms += ms;
  }
  p->npend = 0;
  prof_phase_t *ph = phase_of(p);
  ph->wall_s += wall_s;
  ph->steps++;
  return GC_OK;
}

static int by_phase_then_time(const void *a, const void *b) {
  const prof_row_t *x = a, *y = b;
  int c = strcmp(x->phase, y->phase);
  if (c) return -c; /* "prefill" before "decode" */
  return x->ms < y->ms ? 1 : x->ms > y->ms ? -1 : 0;
}

static void print_phase(const gc_prof_t *p, const prof_row_t *rows, const prof_phase_t *ph,
                        FILE *f) {
  double sum = 0;
  for (int i = 0; i < p->nrows; i++)
    if (!strcmp(rows[i].phase, ph->name)) sum += rows[i].ms;
  double wall = ph->wall_s * 1e3;
  fprintf(f, "\n%s: %lld step%s, wall %.3f ms (%.3f ms per step), kernels %.3f ms (%.1f%% of wall)\n",
          ph->name, (long long)ph->steps, ph->steps == 1 ? "" : "s", wall,
          ph->steps ? wall / (double)ph->steps : 0.0, sum, wall > 0 ? 100 * sum / wall : 0.0);
  fprintf(f, "%7s %10s %10s %9s %8s %6s  %-44s %s\n", "count", "total ms", "mean us", "TFLOP/s",
          "GB/s", "share", "problem", "kernel");
  for (int i = 0; i < p->nrows; i++) {
    const prof_row_t *r = &rows[i];
    if (strcmp(r->phase, ph->name)) continue;
    double s = r->ms * 1e-3;
    fprintf(f, "%7lld %10.3f %10.2f %9.3f %8.1f %5.1f%%  %-44s %s\n", (long long)r->count, r->ms,
            r->ms * 1e3 / (double)r->count, s > 0 ? r->flops / s / 1e12 : 0.0,
            s > 0 ? r->bytes / s / 1e9 : 0.0, wall > 0 ? 100 * r->ms / wall : 0.0, r->key,
            r->kernel);
  }
}

void gc_prof_print(const gc_prof_t *p, FILE *f) {
  prof_row_t *rows = malloc((size_t)p->nrows * sizeof *rows + 1);
  if (!rows) return;
  memcpy(rows, p->rows, (size_t)p->nrows * sizeof *rows);
  qsort(rows, (size_t)p->nrows, sizeof *rows, by_phase_then_time);
  fprintf(f, "profile on %s (%s): device time per kernel, events around every launch, no graphs\n",
          gc_dev_info(p->dev)->name, gc_dev_info(p->dev)->target);
  for (int i = 0; i < p->nphases; i++) print_phase(p, rows, &p->phases[i], f);
  free(rows);
}
