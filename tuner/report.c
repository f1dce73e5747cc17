/* report.c — the tuning report: a database read whole (gc_db_dump), grouped
 * by device, target and problem, written as one HTML page whose plots are
 * inline SVG drawn here. The page has no script and loads nothing: a
 * Content-Security-Policy of default-src 'none' says so to the browser.
 * Every string from the database goes through esc(). */
#include "report.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/ops.h"
#include "../gen/target.h"
#include "../gen/template.h"

/* ---- published peaks (vendor data sheets, dense, no sparsity) ----------- */

/* Matched in order against the device name, so the specific names come
 * before the general ones (H100 PCIe before H100). */
static const gc_report_peak_t peaks[] = {
    {"H200", 4800, 989, 67},           {"H100 PCIe", 2000, 756, 51},
    {"H100 NVL", 3900, 835, 60},       {"H100", 3350, 989, 67},
    {"A100-SXM4-80GB", 2039, 312, 19.5}, {"A100 80GB PCIe", 1935, 312, 19.5},
    {"A100", 1555, 312, 19.5},         {"MI300X", 5300, 1307, 163.4},
    {"MI250X", 3277, 383, 95.7},       {"MI210", 1638, 181, 45.3},
    {"7900 XTX", 960, 123, 61},
};

int gc_report_peak(const char *device_name, gc_report_peak_t *out) {
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < GC_ARRAY_LEN(peaks); i++)
    if (strstr(device_name, peaks[i].name)) {
      *out = peaks[i];
      return 1;
    }
  return 0;
}

/* ---- output with a sticky error ------------------------------------------ */

typedef struct out {
  gc_buf_t *b;
  gc_err_t *e;
  int err;
} out_t;

static void put(out_t *o, const char *s) {
  if (!o->err && gc_buf_append(o->b, s, strlen(s), o->e)) o->err = GC_ENOMEM;
}

static void putf(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(out_t *o, const char *fmt, ...) {
  char small[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0 || o->err) return;
  if ((size_t)n < sizeof small) {
    put(o, small);
    return;
  }
  char *big = gc_malloc((size_t)n + 1, o->e);
  if (!big) {
    o->err = GC_ENOMEM;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  put(o, big);
  free(big);
}

/* Length of the well-formed UTF-8 sequence at s (n bytes left), or 0: an
 * invalid byte, an overlong form, a surrogate, past U+10FFFF, or a C1
 * control. */
static int utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0], cp;
  int len;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
  else return 0;
  if (n < (size_t)len) return 0;
  for (int i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3f);
  }
  if ((len == 2 && cp < 0xa0) || (len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
      (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
    return 0;
  return len;
}

/* s as HTML text or a quoted attribute value: & < > " ' as references,
 * control characters and bytes that are not UTF-8 as U+FFFD. Safe in
 * element content and in "..." attributes, the only places it goes. */
static void esc(out_t *o, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s);
  char tmp[2] = {0, 0};
  while (n) {
    int len = utf8_len(p, n);
    if (len == 1) {
      switch (*p) {
        case '&': put(o, "&amp;"); break;
        case '<': put(o, "&lt;"); break;
        case '>': put(o, "&gt;"); break;
        case '"': put(o, "&quot;"); break;
        case '\'': put(o, "&#39;"); break;
        default:
          if ((*p < 0x20 && *p != '\t' && *p != '\n') || *p == 0x7f) put(o, "\xef\xbf\xbd");
          else tmp[0] = (char)*p, put(o, tmp);
      }
    } else if (len > 1) {
      if (!o->err && gc_buf_append(o->b, p, (size_t)len, o->e)) o->err = GC_ENOMEM;
    } else {
      put(o, "\xef\xbf\xbd");
      len = 1;
    }
    p += len;
    n -= (size_t)len;
  }
}

/* ---- the database grouped ----------------------------------------------- */

/* One problem's measurements on one device for one target. */
typedef struct group {
  int64_t dev, prob, lo, hi;      /* rows d->meas[lo, hi) */
  const char *target;
  int pidx;                       /* d->probs[pidx] */
  const gc_db_meas_row_t *win;    /* the winner, or NULL */
  const gc_db_win_row_t *wrow;    /* its winners row (with its step check), or NULL */
  const gc_db_meas_row_t *def;    /* the template default's row, or NULL */
  char def_desc[600];             /* "template params" of the default, "" if unknown */
  double best, bound_us;          /* fastest verified median; roofline bound (NAN: unknown) */
  int64_t counts[6], nok;         /* rows by status (gc_db_statuses order); verified ones */
  int id;                         /* anchor number in the page */
} group_t;

typedef struct report {
  const gc_db_dump_t *d;
  group_t *g;
  int64_t ng;
  gc_templates_t tpls;
  int have_tpls;
  out_t o;
  int64_t plots;
} report_t;

static int status_index(const char *s) {
  for (int i = 0; i < 6; i++)
    if (!strcmp(s, gc_db_statuses[i])) return i;
  return -1;
}

static int prob_index(const gc_db_dump_t *d, int64_t id) {
  for (int64_t i = 0; i < d->nprobs; i++)
    if (d->probs[i].id == id) return (int)i;
  return -1;
}

static const gc_db_dev_row_t *device(const gc_db_dump_t *d, int64_t id) {
  for (int64_t i = 0; i < d->ndevs; i++)
    if (d->devs[i].id == id) return &d->devs[i];
  return NULL;
}

static int cmp_group(const void *a, const void *b) {
  const group_t *x = a, *y = b;
  if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
  int t = strcmp(x->target, y->target);
  if (t) return t;
  return x->pidx - y->pidx;
}

/* The candidate of g that the templates name as p's default on g's
 * target: same template, same version, same parameters. */
static void find_default(report_t *r, group_t *g, const gc_target_t *tg) {
  const gc_db_prob_row_t *pr = &r->d->probs[g->pidx];
  gc_variant_t v;
  if (!r->have_tpls || !pr->parsed || gc_tpl_pick_default(&r->tpls, tg, &pr->p, &v, NULL)) return;
  snprintf(g->def_desc, sizeof g->def_desc, "%s %s", v.tpl->name, v.params);
  for (int64_t i = g->lo; i < g->hi; i++) {
    const gc_db_meas_row_t *m = &r->d->meas[i];
    if (!strcmp(m->template_name, v.tpl->name) && !strcmp(m->template_hash, v.tpl->hash) &&
        !strcmp(m->params, v.params))
      g->def = m;
  }
}

/* The time no kernel can beat on the device: its FLOPs at the peak
 * matrix rate of the problem's input dtype, or its bytes at the peak
 * bandwidth, whichever is longer. */
static double bound_us(const gc_db_prob_row_t *pr, const gc_report_peak_t *pk) {
  if (!pr->parsed || pk->gbps <= 0) return NAN;
  int half = pr->p.ta == GC_DT_F16 || pr->p.ta == GC_DT_BF16 || pr->p.tb == GC_DT_F16 ||
             pr->p.tb == GC_DT_BF16;
  double tflops = half ? pk->tflops16 : pk->tflops32;
  double t_math = tflops > 0 ? gc_op_tune_flops(&pr->p) / (tflops * 1e12) : 0;
  double t_mem = gc_op_tune_bytes(&pr->p) / (pk->gbps * 1e9);
  return 1e6 * (t_math > t_mem ? t_math : t_mem);
}

static void finish_group(report_t *r, group_t *g, const gc_target_t *tg, int tg_ok) {
  const gc_db_dump_t *d = r->d;
  const gc_db_dev_row_t *dv = device(d, g->dev);
  gc_report_peak_t pk;
  g->best = NAN;
  for (int64_t i = g->lo; i < g->hi; i++) {
    const gc_db_meas_row_t *m = &d->meas[i];
    int s = status_index(m->status);
    if (s >= 0) g->counts[s]++;
    if (s == 0 && isfinite(m->median_us) && m->median_us > 0) {
      g->nok++;
      if (!(g->best <= m->median_us)) g->best = m->median_us;
    }
  }
  for (int64_t w = 0; w < d->nwins; w++)
    if (d->wins[w].device_id == g->dev && d->wins[w].problem_id == g->prob &&
        !strcmp(d->wins[w].target, g->target))
      for (int64_t i = g->lo; i < g->hi; i++)
        if (d->meas[i].id == d->wins[w].measurement_id) g->win = &d->meas[i], g->wrow = &d->wins[w];
  if (tg_ok) find_default(r, g, tg);
  g->bound_us = dv && gc_report_peak(dv->name, &pk) ? bound_us(&d->probs[g->pidx], &pk) : NAN;
}

/* Split the measurements into groups, ordered by device, target and
 * problem, each with its winner, default, counts and bound. */
static int build_groups(report_t *r, gc_err_t *e) {
  const gc_db_dump_t *d = r->d;
  r->g = gc_calloc((size_t)d->nmeas + 1, sizeof *r->g, e);
  if (!r->g) return GC_ENOMEM;
  for (int64_t i = 0; i < d->nmeas; i++) {
    const gc_db_meas_row_t *m = &d->meas[i];
    group_t *last = r->ng ? &r->g[r->ng - 1] : NULL;
    if (last && last->dev == m->device_id && last->prob == m->problem_id &&
        !strcmp(last->target, m->target)) {
      last->hi = i + 1;
      continue;
    }
    int p = prob_index(d, m->problem_id);
    if (p < 0) continue; /* a measurement of no problem: the file is broken there */
    r->g[r->ng++] = (group_t){.dev = m->device_id, .prob = m->problem_id, .lo = i, .hi = i + 1,
                              .target = m->target, .pidx = p};
  }
  qsort(r->g, (size_t)r->ng, sizeof *r->g, cmp_group);
  gc_target_t tg;
  int tg_ok = 0;
  for (int64_t i = 0; i < r->ng; i++) {
    if (!i || strcmp(r->g[i].target, r->g[i - 1].target))
      tg_ok = !gc_target_parse(r->g[i].target, &tg, NULL);
    r->g[i].id = (int)i + 1;
    finish_group(r, &r->g[i], &tg, tg_ok);
  }
  return GC_OK;
}

/* ---- numbers ------------------------------------------------------------ */

static void fmt_us(char *out, size_t n, double us) {
  if (!isfinite(us)) snprintf(out, n, "—");
  else if (us < 10) snprintf(out, n, "%.2f", us);
  else if (us < 1000) snprintf(out, n, "%.1f", us);
  else snprintf(out, n, "%.0f", us);
}

/* Throughput figures: three significant digits, no exponent. */
static void fmt_rate(char *out, size_t n, double v) {
  if (!isfinite(v)) snprintf(out, n, "—");
  else if (v >= 100) snprintf(out, n, "%.0f", v);
  else if (v >= 10) snprintf(out, n, "%.1f", v);
  else if (v >= 1) snprintf(out, n, "%.2f", v);
  else snprintf(out, n, "%.3g", v);
}

/* ---- SVG ---------------------------------------------------------------- */

typedef struct axis {
  double lo, hi, p0, p1; /* values lo..hi onto pixels p0..p1 */
  int log;
} axis_t;

static double ax(const axis_t *a, double v) {
  double t = a->log ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo))
                    : (v - a->lo) / (a->hi - a->lo);
  if (!isfinite(t)) t = 0;
  return a->p0 + t * (a->p1 - a->p0);
}

/* A value axis over [lo, hi] (lo > 0): logarithmic when it spans more than
 * a factor of 4, else linear from 0. */
static void value_axis(axis_t *a, double lo, double hi, double p0, double p1) {
  if (!(hi > lo)) lo = lo * 0.9, hi = hi * 1.1;
  a->log = hi / lo > 4;
  a->lo = a->log ? lo / 1.15 : 0;
  a->hi = a->log ? hi * 1.15 : hi * 1.08;
  a->p0 = p0;
  a->p1 = p1;
}

static void tick_label(char *out, size_t n, double v) {
  if (v >= 100) snprintf(out, n, "%.0f", v);
  else if (v >= 1) snprintf(out, n, "%.3g", v);
  else snprintf(out, n, "%.2g", v);
}

/* Horizontal grid lines and labels of a vertical axis between x0 and x1:
 * 1-2-5 steps (log: 1, 2, 5 x 10^k, or powers of 10 where those crowd). */
static void y_ticks(out_t *o, const axis_t *a, double x0, double x1) {
  double ticks[64];
  int n = 0;
  if (a->log) {
    for (int pass = 0; pass < 2 && (n == 0 || n > 8); pass++) {
      n = 0;
      for (int k = (int)floor(log10(a->lo)); k <= (int)ceil(log10(a->hi)) && n < 60; k++)
        for (int m = 0; m < 3; m++) {
          double v = (m == 0 ? 1 : m == 1 ? 2 : 5) * pow(10, k);
          if ((pass == 0 || m == 0) && v >= a->lo && v <= a->hi && n < 60) ticks[n++] = v;
        }
    }
  } else {
    double raw = (a->hi - a->lo) / 4, mag = pow(10, floor(log10(raw))), step = mag;
    if (raw / mag > 5) step = 10 * mag;
    else if (raw / mag > 2) step = 5 * mag;
    else if (raw / mag > 1) step = 2 * mag;
    for (double v = ceil(a->lo / step) * step; v <= a->hi + 1e-9 * step && n < 60; v += step)
      ticks[n++] = v;
  }
  for (int i = 0; i < n; i++) {
    char lab[32];
    double y = ax(a, ticks[i]);
    tick_label(lab, sizeof lab, ticks[i]);
    putf(o, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
            "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
         x0, y, x1, y, x0 - 4, y + 3.5, lab);
  }
}

static const char *const status_class[6] = {"s-ok", "s-cf", "s-rej", "s-vf", "s-lf", "s-to"}; /* gc_db_statuses order */

/* The stacked bar of g's rows by status at y, with the counts below it. */
static void status_strip(out_t *o, const group_t *g, double x0, double x1, double y) {
  int64_t total = 0;
  for (int s = 0; s < 6; s++) total += g->counts[s];
  double x = x0;
  for (int s = 0; s < 6 && total; s++) {
    if (!g->counts[s]) continue;
    double w = (x1 - x0) * (double)g->counts[s] / (double)total;
    putf(o, "<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"8\"><title>%s: "
            "%lld</title></rect>",
         status_class[s], x, y, w, gc_db_statuses[s], (long long)g->counts[s]);
    x += w;
  }
  /* counts, in two lines of three statuses at most */
  for (int line = 0; line < 2; line++) {
    putf(o, "<text class=\"counts\" x=\"%.1f\" y=\"%.1f\">", x0, y + 21 + 13 * line);
    for (int s = 0, k = 0, shown = 0; s < 6; s++) {
      if (!g->counts[s] && s) continue;
      if (k++ / 3 != line) continue;
      putf(o, "<tspan class=\"%s-t\">%s%s %lld</tspan>", status_class[s], shown++ ? " · " : "",
           gc_db_statuses[s], (long long)g->counts[s]);
    }
    put(o, "</text>\n");
  }
}

#define NCOLORS 8

#define MAX_NAMES 64

/* Distinct names in order of first appearance (at most MAX_NAMES; later
 * ones share the last index). */
typedef struct names {
  const char *v[MAX_NAMES];
  int n;
} names_t;

/* The index of s in ns, added where new. */
static int name_index(names_t *ns, const char *s) {
  for (int i = 0; i < ns->n; i++)
    if (!strcmp(ns->v[i], s)) return i;
  if (ns->n == MAX_NAMES) return MAX_NAMES - 1;
  ns->v[ns->n] = s;
  return ns->n++;
}

/* g's templates in order of first appearance: a template's colour is its
 * index modulo NCOLORS. */
static void group_templates(const report_t *r, const group_t *g, names_t *ns) {
  ns->n = 0;
  for (int64_t i = g->lo; i < g->hi; i++) name_index(ns, r->d->meas[i].template_name);
}

/* A diamond around (x, y). */
static void diamond(out_t *o, double x, double y, double s, const char *cls, const char *title) {
  putf(o, "<path class=\"%s\" d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ\"><title>", cls, x,
       y - s, x + s, y, x, y + s, x - s, y);
  esc(o, title);
  put(o, "</title></path>\n");
}

/* Every verified candidate of g by time, fastest first, the winner and the
 * default marked, the bound where known, the failures counted below. */
static void plot_candidates(report_t *r, const group_t *g) {
  out_t *o = &r->o;
  const double W = 380, H = 244, x0 = 52, x1 = W - 12, y0 = 12, y1 = 164;
  double lo = g->best, hi = g->best;
  for (int64_t i = g->lo; i < g->hi; i++) {
    double v = r->d->meas[i].median_us;
    if (!strcmp(r->d->meas[i].status, "ok") && isfinite(v) && v > 0) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  if (isfinite(g->bound_us) && g->bound_us > 0 && g->nok) {
    if (g->bound_us < lo) lo = g->bound_us;
    if (g->bound_us > hi) hi = g->bound_us;
  }
  putf(o, "<svg class=\"plot\" role=\"img\" viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" height=\"%.0f\" "
          "xmlns=\"http://www.w3.org/2000/svg\">\n", W, H, W, H);
  putf(o, "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>\n", x0, y0,
       x1 - x0, y1 - y0);
  names_t tn;
  group_templates(r, g, &tn);
  if (!g->nok) {
    putf(o, "<text class=\"empty\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">no verified "
            "candidate</text>\n", (x0 + x1) / 2, (y0 + y1) / 2);
  } else {
    axis_t a;
    value_axis(&a, lo, hi, y1, y0);
    y_ticks(o, &a, x0, x1);
    putf(o, "<text class=\"label\" transform=\"translate(14 %.1f) rotate(-90)\" "
            "text-anchor=\"middle\">µs%s</text>\n", (y0 + y1) / 2, a.log ? " (log)" : "");
    if (isfinite(g->bound_us) && g->bound_us > 0) {
      char t[32];
      double y = ax(&a, g->bound_us);
      fmt_us(t, sizeof t, g->bound_us);
      putf(o, "<line class=\"bound\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
              "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">device bound "
              "%s µs</text>\n", x0, y, x1, y, x1 - 3, y - 3, t);
    }
    int64_t k = 0;
    double step = (x1 - x0) / (double)g->nok;
    for (int64_t i = g->lo; i < g->hi; i++) {
      const gc_db_meas_row_t *m = &r->d->meas[i];
      if (strcmp(m->status, "ok") || !isfinite(m->median_us) || m->median_us <= 0) continue;
      double x = x0 + step * ((double)k++ + 0.5), y = ax(&a, m->median_us);
      char t[32], title[800];
      fmt_us(t, sizeof t, m->median_us);
      snprintf(title, sizeof title, "%s %s: %s µs (spread %.1f%%)", m->template_name, m->params,
               t, 100 * (isfinite(m->spread) ? m->spread : 0));
      putf(o, "<circle class=\"pt c%d\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\"><title>",
           name_index(&tn, m->template_name) % NCOLORS, x, y);
      esc(o, title);
      put(o, "</title></circle>\n");
      if (m == g->win) diamond(o, x, y, 8, "win", "winner");
      if (m == g->def) {
        put(o, "<circle class=\"def\" ");
        putf(o, "cx=\"%.1f\" cy=\"%.1f\" r=\"8\"><title>template default</title></circle>\n", x, y);
      }
    }
    putf(o, "<text class=\"label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%lld verified "
            "candidates, fastest first</text>\n", (x0 + x1) / 2, y1 + 14, (long long)g->nok);
  }
  status_strip(o, g, x0, x1, y1 + 24);
  put(o, "</svg>\n");
  r->plots++;
}

/* ---- template parameters -------------------------------------------------- */

#define MAX_PARAMS 32

/* The names of params "A=1,B=2" (at most MAX_PARAMS, each cut to 31 bytes). */
static int param_names(const char *params, char names[MAX_PARAMS][32]) {
  int n = 0;
  for (const char *p = params; *p && n < MAX_PARAMS;) {
    size_t len = strcspn(p, "=,");
    snprintf(names[n++], 32, "%.*s", (int)(len < 31 ? len : 31), p);
    p += strcspn(p, ",");
    if (*p) p++;
  }
  return n;
}

/* The value of name in params into out; 0 when absent. */
static int param_value(const char *params, const char *name, char *out, size_t n) {
  size_t nl = strlen(name);
  for (const char *p = params; *p;) {
    if (!strncmp(p, name, nl) && p[nl] == '=') {
      snprintf(out, n, "%.*s", (int)strcspn(p + nl + 1, ","), p + nl + 1);
      return 1;
    }
    p += strcspn(p, ",");
    if (*p) p++;
  }
  return 0;
}

typedef struct pval {
  char v[48];
  double num, min_rel;
} pval_t;

static int numeric(const char *s, double *v) {
  char *end;
  *v = strtod(s, &end);
  return *s && !*end && isfinite(*v);
}

static int cmp_pval_num(const void *a, const void *b) {
  double x = ((const pval_t *)a)->num, y = ((const pval_t *)b)->num;
  return x < y ? -1 : x > y;
}

static int cmp_pval_text(const void *a, const void *b) {
  return strcmp(((const pval_t *)a)->v, ((const pval_t *)b)->v);
}

/* Deterministic jitter in [-1, 1) for a point. */
static double jitter(int64_t id) {
  uint64_t z = (uint64_t)id * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
  return (double)(z >> 11) / (double)(1ull << 52) - 1.0;
}

#define MAX_VALUES 64

/* Time against the values of parameter pname of template tname over the
 * groups [g0, g1): each verified candidate's median over its problem's
 * fastest (1 = the winner's time), the best of each value joined. Draws
 * nothing when fewer than two values were measured. */
static void plot_param(report_t *r, int64_t g0, int64_t g1, const char *tname, const char *pname) {
  out_t *o = &r->o;
  pval_t vals[MAX_VALUES];
  int nv = 0, all_num = 1;
  double hi = 1.1;
  int64_t npts = 0;
  for (int64_t gi = g0; gi < g1; gi++)
    for (int64_t i = r->g[gi].lo; i < r->g[gi].hi; i++) {
      const gc_db_meas_row_t *m = &r->d->meas[i];
      char v[48];
      if (strcmp(m->status, "ok") || strcmp(m->template_name, tname) || !(m->median_us > 0) ||
          !param_value(m->params, pname, v, sizeof v))
        continue;
      double rel = m->median_us / r->g[gi].best;
      int k = 0;
      while (k < nv && strcmp(vals[k].v, v)) k++;
      if (k == nv) {
        if (nv == MAX_VALUES) continue;
        snprintf(vals[nv].v, sizeof vals[nv].v, "%s", v);
        all_num &= numeric(v, &vals[nv].num);
        vals[nv++].min_rel = rel;
      }
      if (rel < vals[k].min_rel) vals[k].min_rel = rel;
      if (rel > hi) hi = rel;
      npts++;
    }
  if (nv < 2) return;
  qsort(vals, (size_t)nv, sizeof *vals, all_num ? cmp_pval_num : cmp_pval_text);
  const double W = 290, H = 200, x0 = 46, x1 = W - 10, y0 = 24, y1 = H - 36;
  axis_t a = {.lo = 1, .hi = hi * 1.1, .p0 = y1, .p1 = y0, .log = 1};
  if (a.hi < 1.2) a.hi = 1.2;
  double band = (x1 - x0) / nv;
  putf(o, "<figure class=\"param\"><svg class=\"plot\" role=\"img\" viewBox=\"0 0 %.0f %.0f\" "
          "width=\"%.0f\" height=\"%.0f\" xmlns=\"http://www.w3.org/2000/svg\">\n", W, H, W, H);
  putf(o, "<text class=\"ptitle\" x=\"%.1f\" y=\"15\">", x0);
  esc(o, tname);
  put(o, " · ");
  esc(o, pname);
  putf(o, "</text>\n<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>\n",
       x0, y0, x1 - x0, y1 - y0);
  y_ticks(o, &a, x0, x1);
  putf(o, "<text class=\"label\" transform=\"translate(12 %.1f) rotate(-90)\" text-anchor=\"middle\">"
          "time / winner's (log)</text>\n", (y0 + y1) / 2);
  for (int k = 0; k < nv; k++) {
    putf(o, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", x0 + band * (k + 0.5),
         y1 + 13);
    esc(o, vals[k].v);
    put(o, "</text>");
  }
  putf(o, "\n<text class=\"label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (x0 + x1) / 2,
       y1 + 28);
  esc(o, pname);
  putf(o, " (%lld candidates)</text>\n", (long long)npts);
  for (int64_t gi = g0; gi < g1; gi++)
    for (int64_t i = r->g[gi].lo; i < r->g[gi].hi; i++) {
      const gc_db_meas_row_t *m = &r->d->meas[i];
      char v[48], title[900], t[32];
      if (strcmp(m->status, "ok") || strcmp(m->template_name, tname) || !(m->median_us > 0) ||
          !param_value(m->params, pname, v, sizeof v))
        continue;
      int k = 0;
      while (k < nv && strcmp(vals[k].v, v)) k++;
      if (k == nv) continue;
      double x = x0 + band * (k + 0.5 + 0.3 * jitter(m->id)), y = ax(&a, m->median_us / r->g[gi].best);
      fmt_us(t, sizeof t, m->median_us);
      snprintf(title, sizeof title, "%s: %s %s, %s µs", r->d->probs[r->g[gi].pidx].key, tname,
               m->params, t);
      putf(o, "<circle class=\"ppt\" cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\"><title>", x, y);
      esc(o, title);
      put(o, "</title></circle>\n");
    }
  put(o, "<polyline class=\"best\" points=\"");
  for (int k = 0; k < nv; k++) putf(o, "%.1f,%.1f ", x0 + band * (k + 0.5), ax(&a, vals[k].min_rel));
  put(o, "\"/>\n</svg></figure>\n");
  r->plots++;
}

/* Every (template, parameter) of the groups [g0, g1) with two or more
 * values measured. */
static void param_plots(report_t *r, int64_t g0, int64_t g1) {
  names_t seen = {0};
  for (int64_t gi = g0; gi < g1; gi++)
    for (int64_t i = r->g[gi].lo; i < r->g[gi].hi; i++) {
      const gc_db_meas_row_t *m = &r->d->meas[i];
      int before = seen.n;
      /* the first verified row of each template names its parameters */
      if (strcmp(m->status, "ok") || seen.n == MAX_NAMES || (name_index(&seen, m->template_name), seen.n == before))
        continue;
      char names[MAX_PARAMS][32];
      int n = param_names(m->params, names);
      for (int p = 0; p < n; p++) plot_param(r, g0, g1, m->template_name, names[p]);
    }
}

/* ---- the page ------------------------------------------------------------ */

static const char css[] =
    "body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#1d2330;"
    "background:#fff}h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;"
    "border-bottom:1px solid #d5d9e0;padding-bottom:4px}h3{font-size:15px;margin:18px 0 6px}"
    ".meta{color:#566}table{border-collapse:collapse;margin:6px 0 12px}th,td{border:1px solid "
    "#d5d9e0;padding:3px 7px;text-align:left;vertical-align:top}th{background:#f1f3f6}"
    "td.num{text-align:right;font-variant-numeric:tabular-nums}td.code,span.code{font-family:"
    "ui-monospace,Menlo,Consolas,monospace;font-size:12px;overflow-wrap:anywhere}"
    ".grid-plots{display:flex;flex-wrap:wrap;gap:14px}figure{margin:0;border:1px solid #e3e6eb;"
    "padding:6px;background:#fcfcfd}figcaption{font-size:12px;max-width:380px;overflow-wrap:"
    "anywhere}svg.plot{display:block}svg .frame{fill:#fff;stroke:#aab}svg .grid{stroke:#e6e8ee}"
    "svg text{font:10px system-ui,sans-serif;fill:#334}svg .label{font-size:11px}svg .ptitle{"
    "font-size:12px;font-weight:600}svg .empty{font-size:13px;fill:#a33}svg .pt{stroke:#fff;"
    "stroke-width:.6}svg .win{fill:none;stroke:#0a8f3c;stroke-width:2.2}svg .def{fill:none;"
    "stroke:#d62728;stroke-width:1.6;stroke-dasharray:3 2}svg .bound{stroke:#7a5;stroke-width:1.2;"
    "stroke-dasharray:6 3}svg .ppt{fill:#3b6fb6;fill-opacity:.45}svg .best{fill:none;stroke:"
    "#0a8f3c;stroke-width:1.6}.c0{fill:#3b6fb6}.c1{fill:#e8862a}.c2{fill:#8c5fb0}.c3{fill:#2aa198}"
    ".c4{fill:#c2478f}.c5{fill:#7f7f7f}.c6{fill:#b5a01a}.c7{fill:#5a3d2b}.sw{display:inline-block;"
    "width:10px;height:10px;margin:0 3px 0 8px;border-radius:5px}.s-ok{fill:#4caf50}.s-rej{fill:"
    "#9e9e9e}.s-cf{fill:#ff9800}.s-vf{fill:#e53935}.s-lf{fill:#8e24aa}.s-to{fill:#6d4c41}"
    ".s-ok-t{fill:#2e7d32}.s-rej-t{fill:#616161}.s-cf-t{fill:#e65100}.s-vf-t{fill:#c62828}"
    ".s-lf-t{fill:#6a1b9a}.s-to-t{fill:#4e342e}.key{font-size:12px;color:#444}.bad{color:#b3261e}";

static const char *const swatch_color[NCOLORS] = {"#3b6fb6", "#e8862a", "#8c5fb0", "#2aa198",
                                                   "#c2478f", "#7f7f7f", "#b5a01a", "#5a3d2b"};

static void page_head(report_t *r, const char *label) {
  out_t *o = &r->o;
  char when[64];
  time_t now = time(NULL);
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
  put(o, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
         "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
         "style-src 'unsafe-inline'\">\n<meta name=\"viewport\" content=\"width=device-width\">\n"
         "<title>gcore tuning report</title>\n<style>");
  put(o, css);
  put(o, "</style></head>\n<body>\n<h1>gcore tuning report</h1>\n<p class=\"meta\">database <span "
         "class=\"code\">");
  esc(o, label);
  putf(o, "</span> · %lld measurements of %lld problems on %lld devices · written %s by gcore-tune "
          "%s</p>\n", (long long)r->d->nmeas, (long long)r->d->nprobs, (long long)r->d->ndevs, when,
       GC_VERSION);
  put(o, "<p class=\"key\">In each plot every verified candidate is a dot (colour: its template), "
         "fastest left; <svg width=\"14\" height=\"14\" viewBox=\"0 0 14 14\"><path class=\"win\" "
         "d=\"M7 1L13 7L7 13L1 7Z\"/></svg> the winner, <svg width=\"14\" height=\"14\" viewBox=\"0 0 "
         "14 14\"><circle class=\"def\" cx=\"7\" cy=\"7\" r=\"5.5\"/></svg> the template default "
         "(what a bundle uses untuned); the bar below counts every candidate by status. The device "
         "bound is the time of the problem's bytes at the device's peak bandwidth or its FLOPs at "
         "its peak matrix rate, whichever is longer (published figures; shown where gcore knows "
         "the device).</p>\n");
}

static void devices_table(report_t *r) {
  out_t *o = &r->o;
  put(o, "<h2>Devices</h2>\n<table><tr><th>id</th><th>backend</th><th>arch</th><th>name</th>"
         "<th>compute units</th><th>memory</th><th>driver</th><th>peak used for bounds</th></tr>\n");
  for (int64_t i = 0; i < r->d->ndevs; i++) {
    const gc_db_dev_row_t *dv = &r->d->devs[i];
    gc_report_peak_t pk;
    putf(o, "<tr><td class=\"num\">%lld</td><td>", (long long)dv->id);
    esc(o, dv->backend);
    put(o, "</td><td class=\"code\">");
    esc(o, dv->arch);
    put(o, "</td><td>");
    esc(o, dv->name);
    putf(o, "</td><td class=\"num\">%lld</td><td class=\"num\">%.1f GiB</td><td class=\"code\">",
         (long long)dv->compute_units, (double)dv->mem_bytes / (1024.0 * 1024 * 1024));
    esc(o, dv->driver);
    if (gc_report_peak(dv->name, &pk))
      putf(o, "</td><td>%.0f GB/s, %.0f TFLOP/s 16-bit, %.1f TFLOP/s 32-bit</td></tr>\n", pk.gbps,
           pk.tflops16, pk.tflops32);
    else
      put(o, "</td><td>none known</td></tr>\n");
  }
  put(o, "</table>\n");
}

static void failures_cell(out_t *o, const group_t *g) {
  int any = 0;
  for (int s = 1; s < 6; s++)
    if (g->counts[s]) putf(o, "%s%lld %s", any++ ? ", " : "", (long long)g->counts[s], gc_db_statuses[s]);
  if (!any) put(o, "none");
}

/* The cell of a winner's step check (gcore-tune --model): its verdict and
 * the decode step's time with it against the default's. */
static void step_check_cell(out_t *o, const gc_db_win_row_t *w) {
  if (!w || !w->step_checked) {
    put(o, "<td>—</td>");
    return;
  }
  double pct = 100 * (w->step_winner_us / w->step_default_us - 1);
  char a[32], b[32], step[48];
  fmt_us(a, sizeof a, w->step_winner_us);
  fmt_us(b, sizeof b, w->step_default_us);
  gc_db_step_name(w->step_rows, step, sizeof step);
  if (w->step_kept) putf(o, "<td>kept: %s µs a step, %+.1f%% against the default's %s (%s)</td>", a, pct, b, step);
  else putf(o, "<td class=\"bad\">refused: %s µs a step, %+.1f%% against the default's %s (%s); "
               "bundles build the default</td>", a, pct, b, step);
}

/* The winners' table of the groups [g0, g1), then a line with the
 * geometric mean speed-up over the defaults of every problem whose
 * default was measured and verified (1 where the default won). */
static void summary_table(report_t *r, int64_t g0, int64_t g1) {
  out_t *o = &r->o;
  double logsum = 0;
  int64_t ngm = 0, nwon = 0;
  put(o, "<table class=\"summary\"><tr><th>problem</th><th>winner</th><th>time µs</th>"
         "<th>TFLOP/s</th><th>GB/s</th><th>speed-up over the default</th><th>of the device "
         "bound</th><th>in the decode step</th><th>verified / measured</th><th>failures</th></tr>\n");
  for (int64_t gi = g0; gi < g1; gi++) {
    const group_t *g = &r->g[gi];
    const gc_db_meas_row_t *w = g->win;
    char t[32];
    putf(o, "<tr><td class=\"code\"><a href=\"#p%d\">", g->id);
    esc(o, r->d->probs[g->pidx].key);
    put(o, "</a></td><td class=\"code\">");
    if (w) {
      esc(o, w->template_name);
      put(o, " ");
      esc(o, w->params);
      char tf[32], gb[32];
      fmt_us(t, sizeof t, w->median_us);
      fmt_rate(tf, sizeof tf, w->tflops);
      fmt_rate(gb, sizeof gb, w->gbps);
      putf(o, "</td><td class=\"num\">%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td>",
           t, tf, gb);
      if (g->def && g->def == w) {
        put(o, "<td class=\"num\">1.00× (the default won)</td>");
        ngm++;
        nwon++;
      } else if (g->def && !strcmp(g->def->status, "ok") && g->def->median_us > 0) {
        double x = g->def->median_us / w->median_us;
        putf(o, "<td class=\"num\">%.2f×</td>", x);
        logsum += log(x);
        ngm++;
      } else if (g->def) {
        put(o, "<td class=\"bad\">default ");
        esc(o, g->def->status);
        put(o, "</td>");
      } else {
        put(o, "<td>default not measured</td>");
      }
      if (isfinite(g->bound_us)) putf(o, "<td class=\"num\">%.0f%%</td>", 100 * g->bound_us / w->median_us);
      else put(o, "<td>—</td>");
      step_check_cell(o, g->wrow);
    } else {
      put(o, "<span class=\"bad\">no verified variant</span></td><td></td><td></td><td></td><td></td><td></td>"
             "<td></td>");
    }
    putf(o, "<td class=\"num\">%lld / %lld</td><td>", (long long)g->nok, (long long)(g->hi - g->lo));
    failures_cell(o, g);
    put(o, "</td></tr>\n");
  }
  put(o, "</table>\n");
  if (ngm)
    putf(o, "<p>Geometric mean speed-up of the winners over the template defaults: <b>%.2f×</b> "
            "over the %lld problems whose default was measured and verified (%lld of them won "
            "by the default).</p>\n",
         exp(logsum / (double)ngm), (long long)ngm, (long long)nwon);
}

static void candidate_figure(report_t *r, const group_t *g) {
  out_t *o = &r->o;
  putf(o, "<figure id=\"p%d\">", g->id);
  plot_candidates(r, g);
  put(o, "<figcaption><span class=\"code\">");
  esc(o, r->d->probs[g->pidx].key);
  put(o, "</span><br>");
  /* the templates' colours */
  names_t tn;
  group_templates(r, g, &tn);
  for (int i = 0; i < tn.n; i++) {
    putf(o, "<span class=\"sw\" style=\"background:%s\"></span>", swatch_color[i % NCOLORS]);
    esc(o, tn.v[i]);
  }
  if (g->win) {
    char t[32];
    fmt_us(t, sizeof t, g->win->median_us);
    put(o, "<br>winner: <span class=\"code\">");
    esc(o, g->win->params);
    putf(o, "</span> %s µs", t);
  }
  if (g->def && strcmp(g->def->status, "ok")) {
    put(o, "<br><span class=\"bad\">default <span class=\"code\">");
    esc(o, g->def_desc);
    put(o, "</span>: ");
    esc(o, g->def->status);
    if (g->def->detail[0]) {
      put(o, " (");
      esc(o, g->def->detail);
      put(o, ")");
    }
    put(o, "</span>");
  } else if (!g->def && g->def_desc[0]) {
    put(o, "<br>default <span class=\"code\">");
    esc(o, g->def_desc);
    put(o, "</span>: not measured in this database");
  }
  /* the first reason of each kind of failure */
  for (int s = 1; s < 6; s++)
    for (int64_t i = g->lo; i < g->hi; i++) {
      const gc_db_meas_row_t *m = &r->d->meas[i];
      if (strcmp(m->status, gc_db_statuses[s]) || !m->detail[0]) continue;
      putf(o, "<br><span class=\"key\">first %s: ", gc_db_statuses[s]);
      esc(o, m->detail);
      put(o, "</span>");
      break;
    }
  put(o, "</figcaption></figure>\n");
}

/* One device and target: the winners' table, the candidates of every
 * problem, the parameter plots. */
static void section(report_t *r, int64_t g0, int64_t g1) {
  out_t *o = &r->o;
  const gc_db_dev_row_t *dv = device(r->d, r->g[g0].dev);
  put(o, "<h2>");
  esc(o, dv ? dv->name : "?");
  put(o, " — target <span class=\"code\">");
  esc(o, r->g[g0].target);
  putf(o, "</span></h2>\n<p class=\"meta\">device %lld", (long long)r->g[g0].dev);
  if (dv) {
    put(o, ": ");
    esc(o, dv->backend);
    put(o, " ");
    esc(o, dv->arch);
    putf(o, ", %lld compute units", (long long)dv->compute_units);
  }
  putf(o, " · %lld problems</p>\n<h3>Winners</h3>\n", (long long)(g1 - g0));
  summary_table(r, g0, g1);
  put(o, "<h3>Candidates per problem</h3>\n<div class=\"grid-plots\">\n");
  for (int64_t gi = g0; gi < g1; gi++) candidate_figure(r, &r->g[gi]);
  put(o, "</div>\n<h3>Time against each template parameter</h3>\n<p class=\"key\">Every verified "
         "candidate of a template over all problems of this section: its time over its problem's "
         "fastest; the line joins each value's best.</p>\n<div class=\"grid-plots\">\n");
  param_plots(r, g0, g1);
  put(o, "</div>\n");
}

int gc_report_html(gc_db_t *db, const char *db_label, const char *templates_dir, gc_buf_t *out,
                   gc_report_stats_t *st, gc_err_t *e) {
  gc_db_dump_t d;
  report_t r;
  memset(&r, 0, sizeof r);
  memset(st, 0, sizeof *st);
  if (gc_db_dump(db, &d, e)) return e->code;
  r.d = &d;
  r.o = (out_t){out, e, GC_OK};
  r.have_tpls = !gc_tpl_load_all(templates_dir, &r.tpls, NULL);
  int rc = build_groups(&r, e);
  if (!rc) {
    page_head(&r, db_label);
    devices_table(&r);
    if (!r.ng) put(&r.o, "<p>The database holds no measurements.</p>\n");
    for (int64_t g0 = 0, g1; g0 < r.ng; g0 = g1) {
      for (g1 = g0 + 1; g1 < r.ng && r.g[g1].dev == r.g[g0].dev && !strcmp(r.g[g1].target, r.g[g0].target);)
        g1++;
      section(&r, g0, g1);
    }
    put(&r.o, "</body></html>\n");
    rc = r.o.err;
  }
  st->devices = d.ndevs;
  st->problems = r.ng;
  st->measurements = d.nmeas;
  st->plots = r.plots;
  if (r.have_tpls) gc_tpl_free_all(&r.tpls);
  free(r.g);
  gc_db_dump_free(&d);
  return rc;
}

int gc_report_write(const char *db_path, const char *templates_dir, const char *out_path,
                    gc_report_stats_t *st, gc_err_t *e) {
  gc_db_t *db = NULL;
  gc_buf_t b = {0};
  int rc = gc_check_output(out_path, 'f', e);
  if (!rc) rc = gc_db_open(db_path, 0, &db, e);
  if (!rc) rc = gc_report_html(db, db_path, templates_dir, &b, st, e);
  if (!rc) rc = gc_write_file(out_path, b.data, b.len, e);
  gc_db_close(db);
  gc_buf_free(&b);
  return rc;
}
