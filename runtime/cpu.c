/* cpu.c — the cpu backend: device memory is host memory, code objects are
 * shared objects loaded from memory (memfd + dlopen), and a launch runs the
 * grid's tasks on a pool of worker threads. Launches are synchronous, so
 * events are host timestamps taken between them. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "dev_impl.h"

#define POOL_STACK (16u << 20) /* kernels keep packed panels on the stack */

typedef void (*cpu_kernel_fn)(void **args, int64_t task);

typedef struct cpu_pool {
  pthread_t *threads;
  int n;                         /* helper threads; the launching thread is one more */
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  atomic_ullong generation;      /* bumped per launch */
  int active;                    /* workers taking part in this launch */
  int finished;                  /* workers done with this launch */
  int quit;
  cpu_kernel_fn fn;
  void **args;
  int64_t ntasks;
  atomic_llong next;             /* next task index */
} cpu_pool_t;

/* A launch recorded in a graph: the kernel, its tasks and threads, and a
 * copy of each argument's value (8 bytes: the widest an argument is). */
#define CPU_GRAPH_ARGS GC_OP_MAX_ARGS /* an argument pack's (core/ops.h) */
typedef struct cpu_node {
  cpu_kernel_fn fn;
  int64_t ntasks;
  int threads, nargs;
  uint64_t vals[CPU_GRAPH_ARGS];
} cpu_node_t;

/* A graph: the launches of one capture, replayed in order. */
typedef struct cpu_graph {
  cpu_node_t *v;
  int n, cap;
} cpu_graph_t;

typedef struct cpu_dev {
  struct gc_dev base;
  cpu_pool_t pool;
  cpu_graph_t *capturing; /* between graph_begin and graph_end: launches are recorded, not run */
  int no_protect; /* GCORE_CPU_PROTECT=0: no page protection, as on a GPU
                     (tests run the GPUs' guard checks on the CPU with it) */
} cpu_dev_t;

static int record(cpu_graph_t *g, cpu_kernel_fn fn, int64_t ntasks, int threads, void **args,
                  gc_err_t *e);
static void cpu_graph_destroy(gc_dev_t *dev, void *exec);

struct gc_module {
  void *handle;
  int fd; /* the memfd stays open while loaded: glibc matches libraries by
             name first, and a reused /proc/self/fd/N would alias another */
};
struct gc_kernel {
  cpu_kernel_fn fn;
};
struct gc_event {
  double t;
};

typedef struct worker_arg {
  cpu_pool_t *pool;
  int index;
} worker_arg_t;

static void run_tasks(cpu_pool_t *p) {
  for (;;) {
    long long t = atomic_fetch_add(&p->next, 1);
    if (t >= p->ntasks) break;
    p->fn(p->args, t);
  }
}

/* Spin a little before sleeping: decode steps launch dozens of small
 * kernels back to back, and a condition-variable wake-up costs more than
 * most of them take. */
static int spin_for_launch(cpu_pool_t *p, uint64_t seen) {
  for (int i = 0; i < 20000; i++) {
    if (atomic_load_explicit(&p->generation, memory_order_acquire) != seen) return 1;
    __builtin_ia32_pause();
  }
  return 0;
}

static void *worker(void *arg) {
  worker_arg_t *w = arg;
  cpu_pool_t *p = w->pool;
  int me = w->index;
  free(w);
  uint64_t seen = 0;
  for (;;) {
    spin_for_launch(p, seen);
    pthread_mutex_lock(&p->mu);
    while (!p->quit && atomic_load(&p->generation) == seen) pthread_cond_wait(&p->go, &p->mu);
    if (p->quit) break;
    seen = atomic_load(&p->generation);
    int mine = me < p->active;
    pthread_mutex_unlock(&p->mu);
    if (!mine) continue;
    run_tasks(p);
    pthread_mutex_lock(&p->mu);
    if (++p->finished == p->active) pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static void pool_stop(cpu_pool_t *p) {
  pthread_mutex_lock(&p->mu);
  p->quit = 1;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->n; i++) pthread_join(p->threads[i], NULL);
  free(p->threads);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->go);
  pthread_cond_destroy(&p->done);
}

static int pool_start(cpu_pool_t *p, int n, gc_err_t *e) {
  memset(p, 0, sizeof *p);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->go, NULL);
  pthread_cond_init(&p->done, NULL);
  if (!(p->threads = gc_calloc((size_t)(n ? n : 1), sizeof *p->threads, e))) return GC_ENOMEM;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, POOL_STACK);
  for (int i = 0; i < n; i++) {
    worker_arg_t *w = gc_malloc(sizeof *w, e);
    if (!w) break;
    *w = (worker_arg_t){p, i};
    if (pthread_create(&p->threads[i], &attr, worker, w)) {
      free(w);
      gc_err_set(e, GC_EDEVICE, "cannot start CPU worker thread %d", i);
      break;
    }
    p->n++;
  }
  pthread_attr_destroy(&attr);
  if (p->n < n) {
    pool_stop(p);
    return e ? e->code : GC_EDEVICE;
  }
  return GC_OK;
}

/* Run fn over ntasks tasks on nthreads threads (0 = all), the calling
 * thread being one of them, and wait. */
static void pool_run(cpu_pool_t *p, cpu_kernel_fn fn, void **args, int64_t ntasks,
                     int nthreads) {
  if (nthreads <= 0 || nthreads > p->n + 1) nthreads = p->n + 1;
  if (nthreads > ntasks) nthreads = (int)ntasks;
  p->fn = fn;
  p->args = args;
  p->ntasks = ntasks;
  atomic_store(&p->next, 0);
  if (nthreads == 1) { /* nobody to wake */
    run_tasks(p);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->active = nthreads - 1;
  p->finished = 0;
  atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  run_tasks(p);
  pthread_mutex_lock(&p->mu);
  while (p->finished < p->active) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

static int cpu_open(int ordinal, gc_dev_t **out, gc_err_t *e) {
  if (ordinal != 0)
    return gc_err_set(e, GC_EDEVICE, "cpu backend has one device (0), not %d", ordinal);
  cpu_dev_t *d = gc_calloc(1, sizeof *d, e);
  if (!d) return GC_ENOMEM;
  d->base.ops = &gc_cpu_ops;
  gc_dev_info_t *in = &d->base.info;
  static const char *const levels[] = {"x86-64", "x86-64", "x86-64-v2", "x86-64-v3",
                                       "x86-64-v4"};
  strcpy(in->backend, "cpu");
  snprintf(in->arch, sizeof in->arch, "%s", levels[gc_host_cpu_level()]);
  snprintf(in->target, sizeof in->target, "cpu:%s", in->arch);
  gc_host_cpu_name(in->name, sizeof in->name);
  in->compute_units = gc_host_ncpu();
  in->mem_bytes = gc_host_mem_bytes();
  in->host_memory = 1;
  struct utsname u;
  snprintf(in->driver, sizeof in->driver, "linux %s", uname(&u) == 0 ? u.release : "?");
  const char *prot = getenv("GCORE_CPU_PROTECT");
  d->no_protect = prot && !strcmp(prot, "0");
  if (pool_start(&d->pool, (int)in->compute_units - 1, e)) {
    free(d);
    return e ? e->code : GC_EDEVICE;
  }
  *out = &d->base;
  return GC_OK;
}

static void cpu_close(gc_dev_t *dev) {
  cpu_dev_t *d = (cpu_dev_t *)dev;
  pool_stop(&d->pool);
  cpu_graph_destroy(dev, d->capturing);
  free(d);
}

/* Code for cpu:x86-64-vN runs on a host of level >= N. */
static int cpu_runs_target(const gc_dev_t *d, const char *target) {
  (void)d;
  if (strncmp(target, "cpu:x86-64", 10)) return 0;
  const char *lv = target + 10;
  int need = !*lv ? 1 : (lv[0] == '-' && lv[1] == 'v' && lv[2] >= '1' && lv[2] <= '4' && !lv[3])
                            ? lv[2] - '0'
                            : 99;
  return need <= gc_host_cpu_level();
}

static int cpu_alloc(gc_dev_t *d, size_t n, gc_dptr_t *out, gc_err_t *e) {
  (void)d;
  void *p = NULL;
  if (posix_memalign(&p, 256, n ? n : 1))
    return gc_err_set(e, GC_ENOMEM, "out of memory allocating %zu bytes", n);
  *out = (gc_dptr_t)(uintptr_t)p;
  return GC_OK;
}

static void cpu_free(gc_dev_t *d, gc_dptr_t p) {
  (void)d;
  free((void *)(uintptr_t)p);
}

static int cpu_upload(gc_dev_t *d, gc_dptr_t dst, const void *src, size_t n, gc_err_t *e) {
  (void)d, (void)e;
  memcpy((void *)(uintptr_t)dst, src, n);
  return GC_OK;
}

static int cpu_download(gc_dev_t *d, void *dst, gc_dptr_t src, size_t n, gc_err_t *e) {
  (void)d, (void)e;
  memcpy(dst, (const void *)(uintptr_t)src, n);
  return GC_OK;
}

static int cpu_memset(gc_dev_t *d, gc_dptr_t dst, int byte, size_t n, gc_err_t *e) {
  (void)d, (void)e;
  memset((void *)(uintptr_t)dst, byte, n);
  return GC_OK;
}

static int cpu_copy(gc_dev_t *d, gc_dptr_t dst, gc_dptr_t src, size_t n, gc_err_t *e) {
  (void)d, (void)e;
  memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
  return GC_OK;
}

static void *cpu_host_ptr(gc_dev_t *d, gc_dptr_t p) {
  (void)d;
  return (void *)(uintptr_t)p;
}

static size_t cpu_page_size(gc_dev_t *d) {
  if (((cpu_dev_t *)d)->no_protect) return 0;
  long pg = sysconf(_SC_PAGESIZE);
  return pg > 0 ? (size_t)pg : 4096;
}

static int cpu_protect(gc_dev_t *d, gc_dptr_t p, size_t n, int prot, gc_err_t *e) {
  (void)d;
  int m = prot == GC_PROT_RW ? PROT_READ | PROT_WRITE : prot == GC_PROT_READ ? PROT_READ : PROT_NONE;
  if (n && mprotect((void *)(uintptr_t)p, n, m))
    return gc_err_set(e, GC_EDEVICE, "mprotect of %zu bytes at %#llx: %s", n,
                      (unsigned long long)p, strerror(errno));
  return GC_OK;
}

/* dlopen needs a file; a sealed memfd is one that nothing else can see. */
static int cpu_module_load(gc_dev_t *d, const void *code, size_t n, gc_module_t **out,
                           gc_err_t *e) {
  (void)d;
  *out = NULL;
  if (n < 64 || memcmp(code, "\177ELF", 4))
    return gc_err_set(e, GC_ECORRUPT, "code object is not an ELF shared object");
  int fd = memfd_create("gcore-code", MFD_CLOEXEC);
  if (fd < 0) return gc_err_set(e, GC_EDEVICE, "memfd_create failed");
  const char *p = code;
  for (size_t off = 0; off < n;) {
    ssize_t w = write(fd, p + off, n - off);
    if (w <= 0) {
      close(fd);
      return gc_err_set(e, GC_EIO, "writing code object to memfd failed");
    }
    off += (size_t)w;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    close(fd);
    return gc_err_set(e, GC_ECORRUPT, "cannot load code object: %s", dlerror());
  }
  gc_module_t *m = gc_malloc(sizeof *m, e);
  if (!m) {
    dlclose(h);
    close(fd);
    return GC_ENOMEM;
  }
  m->handle = h;
  m->fd = fd;
  *out = m;
  return GC_OK;
}

static void cpu_module_unload(gc_dev_t *d, gc_module_t *m) {
  (void)d;
  dlclose(m->handle);
  close(m->fd);
  free(m);
}

static int cpu_kernel(gc_dev_t *d, gc_module_t *m, const char *name, gc_kernel_t **out,
                      gc_err_t *e) {
  (void)d;
  void *sym = dlsym(m->handle, name);
  if (!sym) return gc_err_set(e, GC_ENOTFOUND, "code object has no kernel %s",
                      GC_QUOTED(name));
  gc_kernel_t *k = gc_malloc(sizeof *k, e);
  if (!k) return GC_ENOMEM;
  *(void **)&k->fn = sym;
  *out = k;
  return GC_OK;
}

static int cpu_launch(gc_dev_t *dev, gc_kernel_t *k, const int64_t grid[3],
                      const int64_t block[3], size_t shmem, void **args, gc_err_t *e) {
  (void)shmem;
  cpu_dev_t *d = (cpu_dev_t *)dev;
  int64_t n;
  if (__builtin_mul_overflow(grid[0], grid[1], &n) || __builtin_mul_overflow(n, grid[2], &n))
    return gc_err_set(e, GC_ELAUNCH, "grid too large");
  if (d->capturing) return record(d->capturing, k->fn, n, (int)block[0], args, e);
  pool_run(&d->pool, k->fn, args, n, (int)block[0]);
  return GC_OK;
}

/* ---- graphs: a capture records launches; a replay runs them in order -- */

/* Append a launch to g. args is NULL-terminated (an argument pack's is:
 * gc_argpack_t zeroes the slots after its last); each value is copied. */
static int record(cpu_graph_t *g, cpu_kernel_fn fn, int64_t ntasks, int threads, void **args,
                  gc_err_t *e) {
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 64;
    cpu_node_t *v = gc_realloc(g->v, (size_t)cap * sizeof *v, e);
    if (!v) return GC_ENOMEM;
    g->v = v;
    g->cap = cap;
  }
  cpu_node_t *nd = &g->v[g->n];
  memset(nd, 0, sizeof *nd);
  *nd = (cpu_node_t){.fn = fn, .ntasks = ntasks, .threads = threads};
  for (; args[nd->nargs]; nd->nargs++) {
    if (nd->nargs == CPU_GRAPH_ARGS)
      return gc_err_set(e, GC_ELAUNCH, "a launch with more than %d arguments cannot be captured",
                        CPU_GRAPH_ARGS);
    memcpy(&nd->vals[nd->nargs], args[nd->nargs], sizeof nd->vals[0]);
  }
  g->n++;
  return GC_OK;
}

static int cpu_graph_begin(gc_dev_t *dev, gc_err_t *e) {
  cpu_dev_t *d = (cpu_dev_t *)dev;
  if (d->capturing) return gc_err_set(e, GC_EINVAL, "a graph capture is already open");
  d->capturing = gc_calloc(1, sizeof *d->capturing, e);
  return d->capturing ? GC_OK : GC_ENOMEM;
}

static int cpu_graph_end(gc_dev_t *dev, void **exec, gc_err_t *e) {
  cpu_dev_t *d = (cpu_dev_t *)dev;
  *exec = d->capturing;
  d->capturing = NULL;
  return *exec ? GC_OK : gc_err_set(e, GC_EINVAL, "no graph capture is open");
}

static int cpu_graph_launch(gc_dev_t *dev, void *exec, gc_err_t *e) {
  cpu_dev_t *d = (cpu_dev_t *)dev;
  cpu_graph_t *g = exec;
  if (d->capturing) return gc_err_set(e, GC_EINVAL, "a graph cannot be launched while capturing");
  for (int i = 0; i < g->n; i++) {
    cpu_node_t *nd = &g->v[i];
    void *argv[CPU_GRAPH_ARGS + 1] = {0};
    for (int a = 0; a < nd->nargs; a++) argv[a] = &nd->vals[a];
    pool_run(&d->pool, nd->fn, argv, nd->ntasks, nd->threads);
  }
  return GC_OK;
}

static void cpu_graph_destroy(gc_dev_t *dev, void *exec) {
  (void)dev;
  cpu_graph_t *g = exec;
  if (g) free(g->v);
  free(g);
}

static int cpu_sync(gc_dev_t *d, gc_err_t *e) {
  (void)d, (void)e;
  return GC_OK;
}

static int cpu_event_create(gc_dev_t *d, gc_event_t **out, gc_err_t *e) {
  (void)d;
  *out = gc_calloc(1, sizeof **out, e);
  return *out ? GC_OK : GC_ENOMEM;
}

static void cpu_event_destroy(gc_dev_t *d, gc_event_t *ev) {
  (void)d;
  free(ev);
}

static int cpu_event_record(gc_dev_t *d, gc_event_t *ev, gc_err_t *e) {
  (void)d, (void)e;
  ev->t = gc_now();
  return GC_OK;
}

static int cpu_event_elapsed(gc_dev_t *d, gc_event_t *a, gc_event_t *b, double *ms,
                             gc_err_t *e) {
  (void)d, (void)e;
  *ms = (b->t - a->t) * 1e3;
  return GC_OK;
}

const gc_dev_ops_t gc_cpu_ops = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .runs_target = cpu_runs_target,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .memset = cpu_memset,
    .copy = cpu_copy,
    .host_ptr = cpu_host_ptr,
    .page_size = cpu_page_size,
    .protect = cpu_protect,
    .module_load = cpu_module_load,
    .module_unload = cpu_module_unload,
    .kernel = cpu_kernel,
    .launch = cpu_launch,
    .kernel_pdl = NULL, /* launches run one after the other */
    .sync = cpu_sync,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_elapsed = cpu_event_elapsed,
    .graph_begin = cpu_graph_begin,
    .graph_end = cpu_graph_end,
    .graph_launch = cpu_graph_launch,
    .graph_destroy = cpu_graph_destroy,
    .tmap_encode = NULL, /* no tensor maps */
    .flush = NULL,       /* never asked (gc_check_default_flush is 0 here) */
};
