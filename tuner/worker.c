/* worker.c — the measurement worker: fork, pipes, time-outs, restarts.
 *
 * Child loop: read a request; when its problem differs from the last one,
 * set up inputs and reference (untimed by the parent's clock: the parent
 * allows setup its own long deadline); load the code object; verify; if
 * verified, time, then verify again; reply. The parent never touches the
 * device. A CPU kernel runs in the child, so a write into a protected
 * guard or input faults there: the child's fault handler replies where it
 * was (verify-failed) and exits. */
#include "worker.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include "../base/expr.h"
#include "../runtime/tmap.h"

#define SETUP_TIMEOUT 900.0 /* seconds: the fp64 reference of a large GEMM */

enum { MSG_INFO = 1, MSG_SETUP = 2, MSG_RUN = 3 };

typedef struct msg_hdr {
  int kind;
  int rc;              /* reply: GC_OK or an error code */
  char err[GC_ERR_MSG]; /* reply: the error message */
} msg_hdr_t;

struct gc_worker {
  char backend[8];
  int ordinal;
  pid_t pid;
  int to_child, from_child;
  int have_problem;
  gc_problem_t problem;
};

/* ---- io ----------------------------------------------------------------- */

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Read n bytes with a deadline (timeout < 0: none). 0 ok, -1 EOF/error,
 * -2 timeout. */
static int read_all(int fd, void *p, size_t n, double timeout) {
  char *c = p;
  double end = gc_now() + timeout;
  while (n) {
    if (timeout >= 0) {
      double left = end - gc_now();
      if (left <= 0) return -2;
      struct pollfd pfd = {fd, POLLIN, 0};
      int r = poll(&pfd, 1, (int)(left * 1000) + 1);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) return -2;
    }
    ssize_t got = read(fd, c, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return -1;
    c += got;
    n -= (size_t)got;
  }
  return 0;
}

/* ---- faults in a launch (child) ----------------------------------------- */

/* What the fault handler needs; in_launch is set while a launch runs, so a
 * fault anywhere else (a bug of gcore's own) still ends the worker with
 * the signal, as before. */
static struct {
  gc_check_t *check;
  const char *phase; /* "the verification launch", ... */
  int out;           /* the reply pipe */
} fault_ctx;
static volatile sig_atomic_t in_launch;
static atomic_int faulted;
static msg_hdr_t fault_hdr; /* static: a faulting thread's stack may be nearly spent */
static gc_work_reply_t fault_reply;

/* Append s to the string in d (n bytes): strlen and memcpy are
 * async-signal-safe, snprintf is not. */
static void put(char *d, size_t n, const char *s) {
  size_t at = strlen(d), k = strlen(s);
  if (at + 1 >= n) return;
  if (k > n - 1 - at) k = n - 1 - at;
  memcpy(d + at, s, k);
  d[at + k] = 0;
}

static void put_hex(char *d, size_t n, uint64_t v) {
  char t[20] = "0x", r[16];
  int k = 0;
  do r[k++] = "0123456789abcdef"[v & 15]; while ((v >>= 4) && k < 16);
  for (int j = 0; j < k; j++) t[2 + j] = r[k - 1 - j];
  t[2 + k] = 0;
  put(d, n, t);
}

/* 1 for a write, 0 for a read, -1 where the context does not say. */
static int fault_was_write(void *uctx) {
#if defined(__x86_64__) && defined(REG_ERR)
  return (((ucontext_t *)uctx)->uc_mcontext.gregs[REG_ERR] & 2) != 0; /* the page fault's W bit */
#else
  (void)uctx;
  return -1;
#endif
}

static void on_fault(int sig, siginfo_t *si, void *uctx) {
  if (!in_launch) { /* not a kernel's: die of it as before */
    signal(sig, SIG_DFL);
    return;
  }
  if (atomic_exchange(&faulted, 1))
    for (;;) pause(); /* another thread faulted too and reports; _exit ends us */
  gc_work_reply_t *r = &fault_reply;
  char *d = r->detail, where[256];
  size_t n = sizeof r->detail;
  uint64_t addr = (uint64_t)(uintptr_t)si->si_addr;
  int w = fault_was_write(uctx);
  if (gc_check_locate(fault_ctx.check, addr, where, sizeof where)) {
    strcpy(r->status, "verify-failed");
    put(d, n, w == 1 ? "wrote " : w == 0 ? "read " : "touched ");
    put(d, n, where);
    put(d, n, ", fault at ");
  } else {
    strcpy(r->status, "launch-failed");
    put(d, n, sig == SIGBUS ? "worker died: Bus error at " : "worker died: Segmentation fault at ");
  }
  put_hex(d, n, addr);
  put(d, n, ", in ");
  put(d, n, fault_ctx.phase);
  r->verify.worst = -1; /* no element was checked */
  r->ended = 1;
  fault_hdr.kind = MSG_RUN;
  if (!write_all(fault_ctx.out, &fault_hdr, sizeof fault_hdr))
    write_all(fault_ctx.out, r, sizeof *r);
  _exit(0);
}

static void catch_faults(int out) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  fault_ctx.out = out;
}

/* ---- child ------------------------------------------------------------- */

/* A @prefetch kernel's L2 window in the tuner: a buffer of its own, every
 * byte 0xFF (a NaN in every float dtype and block scale), so that a kernel
 * that writes into its window is caught by the bytes it changed and one
 * that reads its window as data computes NaNs; small, so that the timing
 * carries no more prefetch than production's launches that take none. */
#define WORKER_WINDOW ((size_t)1 << 20)

typedef struct child {
  gc_dev_t *dev;
  gc_check_t *check[GC_OP_MAX_POINTS]; /* the problem at each of its tune points */
  gc_op_scalars_t sc[GC_OP_MAX_POINTS];
  int npoints;                           /* 0: no problem set up */
  gc_dptr_t win;                         /* [WORKER_WINDOW] the window, once a kernel took one; 0: none yet */
  unsigned char *win_host;               /* [WORKER_WINDOW] its contents read back */
} child_t;

static void child_free_checks(child_t *ch) {
  for (int i = 0; i < ch->npoints; i++) gc_check_free(ch->check[i]);
  ch->npoints = 0;
}

/* The problem's checks at every tune point (gc_op_tune_points). */
static int child_setup(child_t *ch, const gc_problem_t *p, uint64_t seed, gc_err_t *e) {
  child_free_checks(ch);
  int n = gc_op_tune_points(p, ch->sc);
  for (; ch->npoints < n; ch->npoints++)
    if (gc_check_setup(ch->dev, p, &ch->sc[ch->npoints], seed, &ch->check[ch->npoints], e)) {
      child_free_checks(ch);
      return e->code;
    }
  return GC_OK;
}

typedef struct launch_ctx {
  gc_dev_t *dev;
  gc_kernel_t *k;
  int64_t grid[3], block[3], shmem;
  gc_tmaps_t tmaps; /* the kernel's tensor maps, if it declares any */
  gc_dptr_t win;    /* @prefetch: the window (child_t.win) ... */
  int64_t win_n;    /* ... of win_n bytes; -1: the kernel takes no window */
} launch_ctx_t;

static int launch_cb(void *ctx, void **args, gc_err_t *e) {
  launch_ctx_t *l = ctx;
  void **a;
  gc_window_args_t w;
  if (gc_tmaps_args(l->dev, &l->tmaps, args, &a, e)) return e->code;
  if (l->win_n >= 0 &&
      gc_window_args(a, gc_tmaps_nargs(&l->tmaps, a), l->win, l->win_n, &w, &a, e))
    return e->code;
  in_launch = 1; /* a CPU launch runs the kernel now, on this process's threads */
  int rc = gc_dev_launch(l->dev, l->k, l->grid, l->block, (size_t)l->shmem, a, e);
  in_launch = 0;
  return rc;
}

/* The child's window, allocated and filled on its first @prefetch kernel
 * (then l's); refilled where a kernel changed it (check_window). */
static int window_setup(child_t *ch, launch_ctx_t *l, gc_err_t *e) {
  if (!ch->win) {
    if (!ch->win_host && !(ch->win_host = gc_malloc(WORKER_WINDOW, e))) return GC_ENOMEM;
    memset(ch->win_host, 0xFF, WORKER_WINDOW);
    if (gc_dev_alloc(ch->dev, WORKER_WINDOW, &ch->win, e)) return e->code;
    if (gc_dev_upload(ch->dev, ch->win, ch->win_host, WORKER_WINDOW, e)) return e->code;
  }
  l->win = ch->win;
  l->win_n = (int64_t)WORKER_WINDOW;
  return GC_OK;
}

/* Whether l's kernel left its window as window_setup filled it: else *ok
 * 0, r's status and detail say where (and the window is filled again for
 * the next kernel). */
static int check_window(child_t *ch, const launch_ctx_t *l, const char *prefix, gc_work_reply_t *r,
                        int *ok, gc_err_t *e) {
  *ok = 1;
  if (l->win_n < 0) return GC_OK;
  if (gc_dev_download(ch->dev, ch->win_host, ch->win, WORKER_WINDOW, e)) return e->code;
  size_t i = 0;
  while (i < WORKER_WINDOW && ch->win_host[i] == 0xFF) i++;
  if (i == WORKER_WINDOW) return GC_OK;
  *ok = 0;
  r->verify.ok = 0;
  snprintf(r->detail, sizeof r->detail, "%swrote into its L2 window (byte %zu of %zu)", prefix, i, WORKER_WINDOW);
  memset(ch->win_host, 0xFF, WORKER_WINDOW);
  return gc_dev_upload(ch->dev, ch->win, ch->win_host, WORKER_WINDOW, e);
}

static int load_kernel(child_t *ch, const gc_work_req_t *q, gc_module_t **mod,
                       launch_ctx_t *l, gc_err_t *e) {
  char *code;
  size_t n;
  gc_env_t env = {0};
  if (gc_read_file(q->obj, GC_CODE_OBJECT_MAX, &code, &n, e)) return e->code;
  int rc = gc_dev_module_load(ch->dev, code, n, mod, e);
  free(code);
  if (rc) return rc;
  l->dev = ch->dev;
  if (gc_dev_kernel(ch->dev, *mod, q->symbol, &l->k, e) ||
      gc_env_parse(&env, q->consts, e) || gc_env_set_dims(&env, &q->problem, e) ||
      gc_env_set_sms(&env, gc_dev_info(ch->dev)->compute_units, e) ||
      gc_expr_eval3(q->grid, &env, l->grid, e) || gc_expr_eval3(q->block, &env, l->block, e) ||
      gc_expr_eval(q->shmem, &env, &l->shmem, e) ||
      gc_tmaps_plan(q->tmaps, &env, &q->problem, &l->tmaps, e))
    return e->code;
  return q->prefetch ? window_setup(ch, l, e) : (l->win_n = -1, GC_OK);
}

/* Launches a timing sample of a @pdl kernel chains where the device
 * overlaps them (the first of a chain follows the cache flush). */
#define WORKER_CHAIN 8

/* One verification of the kernel at every point; *ok 0 and the reply's
 * verify and detail (with prefix before it) from the first that fails. */
static int verify_points(child_t *ch, launch_ctx_t *l, const char *phase, const char *prefix,
                         gc_work_reply_t *r, int *ok, gc_err_t *e) {
  *ok = 1;
  for (int i = 0; i < ch->npoints; i++) {
    gc_verify_t v;
    char at[48];
    fault_ctx.check = ch->check[i];
    fault_ctx.phase = phase;
    if (gc_check_verify(ch->check[i], launch_cb, l, &v, e)) return e->code;
    gc_op_point_label(&ch->sc[i], i, at, sizeof at);
    if (!v.ok) {
      *ok = 0;
      r->verify = v;
      snprintf(r->detail, sizeof r->detail, "%s%s%s", prefix, at, v.why);
      return GC_OK;
    }
    if (i == 0 || v.worst > r->verify.worst) r->verify = v;
  }
  return GC_OK;
}

/* The kernel timed at every point: the sum of their medians (min, max
 * alike), the widest spread and the fewest launches, each point with its
 * share of the time to aim for and what is left of the abandon mark. */
static int time_points(child_t *ch, launch_ctx_t *l, const gc_time_opts_t *opts, gc_timing_t *t,
                       gc_err_t *e) {
  memset(t, 0, sizeof *t);
  for (int i = 0; i < ch->npoints; i++) {
    gc_time_opts_t o = *opts;
    gc_timing_t ti;
    o.min_time = opts->min_time / ch->npoints;
    if (opts->abandon_us > 0) /* > 0 still: a point past the mark stops at min_iters */
      o.abandon_us = opts->abandon_us > t->median_us ? opts->abandon_us - t->median_us : 1e-9;
    fault_ctx.check = ch->check[i];
    if (gc_check_time(ch->check[i], launch_cb, l, &o, &ti, e)) return e->code;
    t->median_us += ti.median_us, t->min_us += ti.min_us, t->max_us += ti.max_us;
    if (ti.spread > t->spread) t->spread = ti.spread;
    if (i == 0 || ti.iters < t->iters) t->iters = ti.iters;
  }
  return GC_OK;
}

static void child_run(child_t *ch, const gc_work_req_t *q, gc_work_reply_t *r,
                      gc_err_t *e) {
  gc_module_t *mod = NULL;
  launch_ctx_t l = {0};
  gc_time_opts_t opts = q->timing;
  int ok;
  memset(r, 0, sizeof *r);
  strcpy(r->status, "launch-failed");
  if (load_kernel(ch, q, &mod, &l, e)) {
    snprintf(r->detail, sizeof r->detail, "%s", e->msg);
    goto out;
  }
  /* a decode step launches a @pdl kernel overlapping the one before it:
   * time it that way where the device does so (gc_time_opts_t.chain) */
  if (q->pdl && gc_dev_kernel_pdl(ch->dev, l.k, 1)) opts.chain = WORKER_CHAIN;
  if (verify_points(ch, &l, "the verification launch", "", r, &ok, e)) {
    snprintf(r->detail, sizeof r->detail, "%s", e->msg);
    goto out;
  }
  if (ok && check_window(ch, &l, "", r, &ok, e)) {
    snprintf(r->detail, sizeof r->detail, "%s", e->msg);
    goto out;
  }
  if (!ok) {
    strcpy(r->status, "verify-failed");
    goto out;
  }
  fault_ctx.phase = "the timed launches";
  if (time_points(ch, &l, &opts, &r->timing, e)) {
    snprintf(r->detail, sizeof r->detail, "%s", e->msg);
    goto out;
  }
  /* again, after the timed launches: what they wrote into guards and
   * inputs, and a kernel that is right only the first time */
  gc_verify_t first = r->verify;
  if (verify_points(ch, &l, "the verification launch after the timed launches",
                    "after the timed launches: ", r, &ok, e) ||
      (ok && check_window(ch, &l, "after the timed launches: ", r, &ok, e))) {
    snprintf(r->detail, sizeof r->detail, "%s", e->msg);
  } else if (!ok) {
    strcpy(r->status, "verify-failed");
  } else {
    strcpy(r->status, "ok");
    if (first.worst > r->verify.worst) r->verify.worst = first.worst;
  }
out:
  fault_ctx.check = NULL;
  free(l.k);
  gc_dev_module_unload(ch->dev, mod);
}

static void child_main(const char *backend, int ordinal, int in, int out) {
  child_t ch = {0};
  gc_err_t e = {0};
  msg_hdr_t h;
  gc_work_req_t q;
  gc_work_reply_t r;
  catch_faults(out);
  int open_rc = gc_dev_open(backend, ordinal, &ch.dev, &e);
  while (read_all(in, &h, sizeof h, -1) == 0 && read_all(in, &q, sizeof q, -1) == 0) {
    msg_hdr_t reply = {h.kind, open_rc, ""};
    memset(&r, 0, sizeof r);
    if (open_rc) {
      snprintf(reply.err, sizeof reply.err, "%s", e.msg);
    } else if (h.kind == MSG_INFO) {
      memcpy(r.detail, gc_dev_info(ch.dev), sizeof(gc_dev_info_t));
    } else if (h.kind == MSG_SETUP) {
      if ((reply.rc = child_setup(&ch, &q.problem, q.seed, &e)))
        snprintf(reply.err, sizeof reply.err, "%s", e.msg);
    } else if (h.kind == MSG_RUN) {
      if (!ch.npoints) {
        reply.rc = GC_EINVAL;
        snprintf(reply.err, sizeof reply.err, "no problem set up");
      } else {
        q.timing.flush = gc_check_default_flush(ch.dev); /* cold cache on GPUs */
        child_run(&ch, &q, &r, &e);
      }
    }
    if (write_all(out, &reply, sizeof reply) || write_all(out, &r, sizeof r)) break;
  }
  child_free_checks(&ch);
  if (ch.win) gc_dev_free(ch.dev, ch.win);
  free(ch.win_host);
  gc_dev_close(ch.dev);
  _exit(0);
}

_Static_assert(sizeof(gc_dev_info_t) <= sizeof(((gc_work_reply_t *)0)->detail),
               "device info travels in the reply's detail field");

/* ---- parent ------------------------------------------------------------ */

static void kill_child(gc_worker_t *w, int *status) {
  if (w->pid <= 0) return;
  kill(w->pid, SIGKILL);
  int st = 0;
  waitpid(w->pid, &st, 0);
  if (status) *status = st;
  close(w->to_child);
  close(w->from_child);
  w->pid = 0;
  w->have_problem = 0;
}

static int spawn(gc_worker_t *w, gc_err_t *e) {
  int down[2], up[2];
  if (pipe(down)) return gc_err_set(e, GC_EIO, "pipe: %s", strerror(errno));
  if (pipe(up)) {
    close(down[0]), close(down[1]);
    return gc_err_set(e, GC_EIO, "pipe: %s", strerror(errno));
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return gc_err_set(e, GC_EIO, "fork: %s", strerror(errno));
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    child_main(w->backend, w->ordinal, down[0], up[1]);
  }
  close(down[0]);
  close(up[1]);
  w->pid = pid;
  w->to_child = down[1];
  w->from_child = up[0];
  return GC_OK;
}

/* One round trip. *died = 1 (and the worker is gone) on crash/timeout;
 * *status then holds the wait status, or -1 for a timeout. */
static int round_trip(gc_worker_t *w, int kind, const gc_work_req_t *q, double timeout,
                      gc_work_reply_t *r, int *died, int *status, gc_err_t *e) {
  *died = 0;
  if (!w->pid && spawn(w, e)) return e->code;
  msg_hdr_t h = {kind, 0, ""};
  int rd = -1;
  if (!write_all(w->to_child, &h, sizeof h) && !write_all(w->to_child, q, sizeof *q)) {
    rd = read_all(w->from_child, &h, sizeof h, timeout);
    if (!rd) rd = read_all(w->from_child, r, sizeof *r, timeout);
  }
  if (rd) {
    int st = 0;
    kill_child(w, &st);
    *died = 1;
    *status = rd == -2 ? -1 : st;
    return GC_OK;
  }
  if (h.rc) return gc_err_set(e, h.rc, "%s", h.err);
  return GC_OK;
}

int gc_worker_start(const char *backend, int ordinal, gc_worker_t **out,
                    gc_dev_info_t *info, gc_err_t *e) {
  signal(SIGPIPE, SIG_IGN);
  gc_worker_t *w = gc_calloc(1, sizeof *w, e);
  if (!w) return GC_ENOMEM;
  snprintf(w->backend, sizeof w->backend, "%s", backend);
  w->ordinal = ordinal;
  gc_work_req_t q = {0};
  gc_work_reply_t r;
  int died, st;
  if (round_trip(w, MSG_INFO, &q, 120, &r, &died, &st, e) ||
      (died && gc_err_set(e, GC_EDEVICE, "the device worker died while opening the device"))) {
    gc_worker_stop(w);
    return e->code;
  }
  memcpy(info, r.detail, sizeof *info);
  *out = w;
  return GC_OK;
}

void gc_worker_stop(gc_worker_t *w) {
  if (!w) return;
  if (w->pid > 0) {
    close(w->to_child); /* EOF ends the child's loop */
    close(w->from_child);
    int st;
    waitpid(w->pid, &st, 0);
  }
  free(w);
}

static void describe_death(int status, double timeout, gc_work_reply_t *r) {
  if (status == -1) {
    strcpy(r->status, "timed-out");
    snprintf(r->detail, sizeof r->detail, "no result within %.0f s; worker killed", timeout);
  } else {
    strcpy(r->status, "launch-failed");
    if (WIFSIGNALED(status))
      snprintf(r->detail, sizeof r->detail, "worker died: %s", strsignal(WTERMSIG(status)));
    else
      snprintf(r->detail, sizeof r->detail, "worker exited with status %d",
               WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
}

int gc_worker_run(gc_worker_t *w, const gc_work_req_t *req, double timeout_s,
                  gc_work_reply_t *rep, gc_err_t *e) {
  int died, st;
  memset(rep, 0, sizeof *rep);
  if (!w->have_problem || memcmp(&w->problem, &req->problem, sizeof w->problem)) {
    gc_work_reply_t tmp;
    if (round_trip(w, MSG_SETUP, req, SETUP_TIMEOUT, &tmp, &died, &st, e)) return e->code;
    if (died)
      return gc_err_set(e, GC_EDEVICE, "the device worker died while setting up the problem");
    w->have_problem = 1;
    w->problem = req->problem;
  }
  if (round_trip(w, MSG_RUN, req, timeout_s, rep, &died, &st, e)) return e->code;
  if (died) describe_death(st, timeout_s, rep);
  /* a failed launch may leave the device context unusable (a CUDA illegal
   * address is sticky): the next candidate gets a fresh worker; one that
   * replied from its fault handler has ended already */
  else if (rep->ended || !strcmp(rep->status, "launch-failed")) kill_child(w, NULL);
  return GC_OK;
}
