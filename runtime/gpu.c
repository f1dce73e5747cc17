/* gpu.c — the GPU backend skeleton: the device operations the cuda and hip
 * backends share, over the vendor's table of calls (gpu_impl.h). One
 * stream per device orders every operation; downloads wait for it. A
 * graph is the stream's capture: launches and memsets issued between
 * begin and end are recorded, not run, and what cannot be recorded
 * (allocations, copies, syncs, event timing, graph launches) is refused
 * while a capture is open. Each call first makes the device current on
 * the calling thread, so any thread may use a device. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_impl.h"

/* Call d's vendor call (a gc_gpu_api_t field) and return its failure,
 * named, from the caller. */
#define GPU_TRY(d, e, code, call, ...)                                         \
  do {                                                                         \
    gc_gpu_res_t r_ = (d)->api->call.fn(__VA_ARGS__);                          \
    if (r_) return gc_gpu_fail((d)->api, e, code, r_, (d)->api->call.name);    \
  } while (0)

int gc_gpu_fail(const gc_gpu_api_t *api, gc_err_t *e, int code, gc_gpu_res_t r,
                const char *call) {
  char what[256];
  if (api->classify(r) == GC_GPU_R_FAULT) code = GC_ELAUNCH;
  api->describe(r, what, sizeof what);
  return gc_err_set(e, code, "%s: %s", call, what);
}

int gc_gpu_bind(gc_gpu_dev_t *d, gc_err_t *e) {
  GPU_TRY(d, e, GC_EDEVICE, bind, d);
  return GC_OK;
}

/* Every call the skeleton makes unconditionally is there, named. */
static int api_complete(const gc_gpu_api_t *a) {
  const struct { const void *fn; const char *name; } calls[] = {
#define C(f) {(const void *)(uintptr_t)a->f.fn, a->f.name}
      C(bind),          C(stream_create), C(stream_destroy),  C(stream_sync),
      C(mem_alloc),     C(mem_free),      C(mem_info),        C(copy_htod),
      C(copy_dtoh),     C(memset8),       C(copy_dtod),       C(module_load),     C(module_unload),
      C(module_function), C(launch),      C(event_create),    C(event_destroy),
      C(event_record),  C(event_sync),    C(event_elapsed),   C(capture_begin),
      C(capture_end),   C(graph_instantiate), C(graph_destroy), C(graph_launch),
      C(graph_exec_destroy),
#undef C
  };
  if (!a->vendor || !a->shmem_what || !a->wrong_isa || !a->describe || !a->classify ||
      !a->check_code || !a->func_shmem.fn != !a->func_set_shmem.fn ||
      !a->host_alloc.fn != !a->host_free.fn)
    return 0;
  for (size_t i = 0; i < GC_ARRAY_LEN(calls); i++)
    if (!calls[i].fn || !calls[i].name) return 0;
  return 1;
}

int gc_gpu_start(gc_gpu_dev_t *d, gc_err_t *e) {
  if (!d->api || !api_complete(d->api)) /* a vendor file's mistake, said at its first open */
    return gc_err_set(e, GC_EINVAL, "the %s backend's table of GPU calls is incomplete",
                      d->base.ops ? d->base.ops->name : "?");
  int rc = gc_gpu_bind(d, e);
  if (rc) return rc;
  GPU_TRY(d, e, GC_EDEVICE, stream_create, &d->stream);
  d->own = d->stream;
  return GC_OK;
}

static int no_capture(gc_gpu_dev_t *d, const char *what, gc_err_t *e) {
  if (!d->capturing) return GC_OK;
  return gc_err_set(e, GC_EINVAL, "%s is not allowed while a %s graph is being captured", what,
                    d->api->vendor);
}

/* Work still queued finishes first; memory and modules the caller did not
 * free stay with the process (or go with CUDA's context when its last
 * user releases it). */
void gc_gpu_close(gc_dev_t *dev) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  if (!d) return;
  const gc_gpu_api_t *api = d->api;
  int bound = !gc_gpu_bind(d, NULL);
  if (bound) {
    if (d->capturing) {
      void *g = NULL;
      if (!api->capture_end.fn(d->stream, &g) && g) api->graph_destroy.fn(g);
    }
    api->stream_sync.fn(d->own);
    api->stream_destroy.fn(d->own);
    for (int b = 0; d->boxes && b < GC_DEV_BOXES; b++) api->event_destroy.fn(d->box_ev[b]);
    if (d->boxes) api->host_free.fn(d->boxes);
  }
  if (api->release) api->release(d, bound);
  free(d);
}

/* ---- memory ---------------------------------------------------------- */

static void fmt_bytes(size_t n, char *buf, size_t len) {
  if (n >= (1ull << 30)) snprintf(buf, len, "%.1f GiB", (double)n / (1ull << 30));
  else if (n >= (1ull << 20)) snprintf(buf, len, "%.1f MiB", (double)n / (1ull << 20));
  else snprintf(buf, len, "%zu bytes", n);
}

int gc_gpu_alloc(gc_dev_t *dev, size_t n, gc_dptr_t *out, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  int rc = no_capture(d, "alloc", e);
  if (rc || (rc = gc_gpu_bind(d, e))) return rc;
  gc_gpu_ptr_t p = 0;
  gc_gpu_res_t r = d->api->mem_alloc.fn(&p, n ? n : 1);
  if (r && d->api->classify(r) == GC_GPU_R_OOM) {
    size_t fr = 0, tot = 0;
    char fs[32] = "?", ts[32] = "?";
    if (!d->api->mem_info.fn(&fr, &tot)) {
      fmt_bytes(fr, fs, sizeof fs);
      fmt_bytes(tot, ts, sizeof ts);
    }
    return gc_err_set(e, GC_ENOMEM, "out of GPU memory allocating %zu bytes (%s free of %s)", n,
                      fs, ts);
  }
  if (r) return gc_gpu_fail(d->api, e, GC_EDEVICE, r, d->api->mem_alloc.name);
  *out = (gc_dptr_t)p;
  return GC_OK;
}

void gc_gpu_free(gc_dev_t *dev, gc_dptr_t p) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  if (p && !gc_gpu_bind(d, NULL)) d->api->mem_free.fn((gc_gpu_ptr_t)p);
}

/* The caller may reuse src as soon as this returns: CUDA's driver stages
 * pageable memory before it returns; where the vendor does not promise
 * that (upload_waits), the stream is waited for. */
int gc_gpu_upload(gc_dev_t *dev, gc_dptr_t dst, const void *src, size_t n, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  int rc = no_capture(d, "upload", e);
  if (rc || !n || (rc = gc_gpu_bind(d, e))) return rc;
  GPU_TRY(d, e, GC_EDEVICE, copy_htod, (gc_gpu_ptr_t)dst, src, n, d->stream);
  if (d->api->upload_waits) GPU_TRY(d, e, GC_EDEVICE, stream_sync, d->stream);
  return GC_OK;
}

int gc_gpu_download(gc_dev_t *dev, void *dst, gc_dptr_t src, size_t n, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  int rc = no_capture(d, "download", e);
  if (rc || !n || (rc = gc_gpu_bind(d, e))) return rc;
  GPU_TRY(d, e, GC_EDEVICE, copy_dtoh, dst, (gc_gpu_ptr_t)src, n, d->stream);
  GPU_TRY(d, e, GC_EDEVICE, stream_sync, d->stream);
  return GC_OK;
}

/* ---- running ahead ------------------------------------------------------ */

int gc_gpu_put32(gc_dev_t *dev, gc_dptr_t dst, uint32_t v, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  if (!d->api->write32.fn) return gc_gpu_upload(dev, dst, &v, sizeof v, e);
  int rc = no_capture(d, "put32", e);
  if (rc || (rc = gc_gpu_bind(d, e))) return rc;
  GPU_TRY(d, e, GC_EDEVICE, write32, d->stream, (gc_gpu_ptr_t)dst, v);
  return GC_OK;
}

/* The page-locked boxes and their events, made at the first post. */
static int boxes_make(gc_gpu_dev_t *d, gc_err_t *e) {
  void *p = NULL;
  GPU_TRY(d, e, GC_EDEVICE, host_alloc, &p, (size_t)GC_DEV_BOXES * GC_DEV_BOX_BYTES);
  /* waited on, never timed: untimed where the backend can make them so */
  const int untimed = d->api->event_create_untimed.fn != NULL;
  gc_gpu_res_t (*make)(void **) = untimed ? d->api->event_create_untimed.fn : d->api->event_create.fn;
  for (int b = 0; b < GC_DEV_BOXES; b++) {
    gc_gpu_res_t r = make(&d->box_ev[b]);
    if (r) {
      while (b-- > 0) d->api->event_destroy.fn(d->box_ev[b]), d->box_ev[b] = NULL;
      d->api->host_free.fn(p);
      return gc_gpu_fail(d->api, e, GC_EDEVICE, r,
                         untimed ? d->api->event_create_untimed.name : d->api->event_create.name);
    }
  }
  d->boxes = p;
  return GC_OK;
}

/* Without host_alloc, a download that waits (into the header's box). */
int gc_gpu_post(gc_dev_t *dev, int box, gc_dptr_t src, size_t n, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  if (!d->api->host_alloc.fn) return gc_gpu_download(dev, dev->box[box], src, n, e);
  int rc = no_capture(d, "post", e);
  if (rc || (rc = gc_gpu_bind(d, e)) || (!d->boxes && (rc = boxes_make(d, e)))) return rc;
  unsigned char *at = d->boxes + (size_t)box * GC_DEV_BOX_BYTES;
  GPU_TRY(d, e, GC_EDEVICE, copy_dtoh, at, (gc_gpu_ptr_t)src, n, d->stream);
  GPU_TRY(d, e, GC_EDEVICE, event_record, d->box_ev[box], d->stream);
  return GC_OK;
}

/* The boxes' device address, where the vendor maps page-locked memory. */
int gc_gpu_box_addr(gc_dev_t *dev, int box, gc_dptr_t *out, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  if (!d->api->host_alloc.fn || !d->api->host_dptr.fn)
    return gc_err_set(e, GC_EUNSUPPORTED, "the %s backend's boxes are not visible to the device", dev->ops->name);
  int rc = gc_gpu_bind(d, e);
  if (rc || (!d->boxes && (rc = boxes_make(d, e)))) return rc;
  gc_gpu_ptr_t p = 0;
  GPU_TRY(d, e, GC_EDEVICE, host_dptr, &p, d->boxes + (size_t)box * GC_DEV_BOX_BYTES);
  *out = (gc_dptr_t)p;
  return GC_OK;
}

/* A post with no copy: the box's event, after what a kernel stored there. */
int gc_gpu_mark(gc_dev_t *dev, int box, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  int rc = no_capture(d, "mark", e);
  if (rc || (rc = gc_gpu_bind(d, e))) return rc;
  if (!d->boxes) return gc_err_set(e, GC_EINVAL, "mark: no kernel can have stored in box %d (no gc_dev_box_addr)", box);
  GPU_TRY(d, e, GC_EDEVICE, event_record, d->box_ev[box], d->stream);
  return GC_OK;
}

int gc_gpu_take(gc_dev_t *dev, int box, void *dst, size_t n, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  if (!d->boxes) { /* posted by a download that waited */
    memcpy(dst, dev->box[box], n);
    return GC_OK;
  }
  int rc = no_capture(d, "take", e);
  if (rc || (rc = gc_gpu_bind(d, e))) return rc;
  GPU_TRY(d, e, GC_EDEVICE, event_sync, d->box_ev[box]);
  memcpy(dst, d->boxes + (size_t)box * GC_DEV_BOX_BYTES, n);
  return GC_OK;
}

/* Allowed in a capture: the memset is recorded. */
int gc_gpu_memset(gc_dev_t *dev, gc_dptr_t dst, int byte, size_t n, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  int rc = gc_gpu_bind(d, e);
  if (rc || !n) return rc;
  GPU_TRY(d, e, GC_EDEVICE, memset8, (gc_gpu_ptr_t)dst, (unsigned char)byte, n, d->stream);
  return GC_OK;
}

/* Allowed in a capture, as a memset. */
int gc_gpu_copy(gc_dev_t *dev, gc_dptr_t dst, gc_dptr_t src, size_t n, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  int rc = gc_gpu_bind(d, e);
  if (rc || !n) return rc;
  GPU_TRY(d, e, GC_EDEVICE, copy_dtod, (gc_gpu_ptr_t)dst, (gc_gpu_ptr_t)src, n, d->stream);
  return GC_OK;
}

void *gc_gpu_host_ptr(gc_dev_t *d, gc_dptr_t p) {
  (void)d, (void)p;
  return NULL;
}

/* ---- code ------------------------------------------------------------ */

static uint64_t le(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

int gc_gpu_check_elf(const void *code, size_t n, const gc_gpu_elf_t *k, gc_err_t *e) {
  const uint8_t *p = code;
  if (!p || n < 64 || memcmp(p, "\177ELF", 4))
    return gc_err_set(e, GC_ECORRUPT, "code object is not %s: not an ELF file (%zu bytes)",
                      k->a_kind, n);
  if (p[4] != 2 || p[5] != 1 || le(p + 18, 2) != k->machine)
    return gc_err_set(e, GC_ECORRUPT, "code object is not %s: ELF for machine %u, not %s (%u)",
                      k->a_kind, (unsigned)le(p + 18, 2), k->machine_name, k->machine);
  uint64_t shoff = le(p + 0x28, 8), shsz = le(p + 0x3a, 2), shnum = le(p + 0x3c, 2);
  uint64_t phoff = le(p + 0x20, 8), phsz = le(p + 0x36, 2), phnum = le(p + 0x38, 2);
  if ((shnum && (shsz < 64 || shoff > n || shnum * shsz > n - shoff)) ||
      (phnum && (phsz < 56 || phoff > n || phnum * phsz > n - phoff)))
    return gc_err_set(e, GC_ECORRUPT, "%s is truncated or corrupt (headers past its end)",
                      k->kind);
  for (uint64_t i = 0; i < shnum; i++) {
    const uint8_t *h = p + shoff + i * shsz;
    uint64_t off = le(h + 24, 8), size = le(h + 32, 8);
    if (le(h + 4, 4) != 8 /* NOBITS */ && (off > n || size > n - off))
      return gc_err_set(e, GC_ECORRUPT, "%s is truncated or corrupt (section %u past its end)",
                        k->kind, (unsigned)i);
  }
  return GC_OK;
}

int gc_gpu_module_load(gc_dev_t *dev, const void *code, size_t n, gc_module_t **out,
                       gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  const gc_gpu_api_t *api = d->api;
  *out = NULL;
  int rc = api->check_code(code, n, e);
  if (rc || (rc = gc_gpu_bind(d, e))) return rc;
  void *mod = NULL;
  gc_gpu_res_t r = api->module_load.fn(&mod, code);
  if (r && api->classify(r) == GC_GPU_R_WRONG_ISA) {
    gc_gpu_fail(api, e, GC_EDEVICE, r, api->module_load.name);
    return gc_err_prefix(e, "%s %s", api->wrong_isa, d->base.info.arch);
  }
  if (r) return gc_gpu_fail(api, e, GC_EDEVICE, r, api->module_load.name);
  gc_module_t *m = gc_malloc(sizeof *m, e);
  if (!m) {
    api->module_unload.fn(mod);
    return GC_ENOMEM;
  }
  m->mod = mod;
  *out = m;
  return GC_OK;
}

void gc_gpu_module_unload(gc_dev_t *dev, gc_module_t *m) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  if (!m) return;
  if (!gc_gpu_bind(d, NULL)) d->api->module_unload.fn(m->mod);
  free(m);
}

/* The kernel handle lives as long as its module. */
int gc_gpu_kernel(gc_dev_t *dev, gc_module_t *m, const char *name, gc_kernel_t **out,
                  gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  const gc_gpu_api_t *api = d->api;
  *out = NULL;
  int rc = gc_gpu_bind(d, e);
  if (rc) return rc;
  void *fn = NULL;
  gc_gpu_res_t r = api->module_function.fn(&fn, m->mod, name);
  if ((r && api->classify(r) == GC_GPU_R_NOT_FOUND) || (!r && !fn))
    return gc_err_set(e, GC_ENOTFOUND, "code object has no kernel %s", GC_QUOTED(name));
  if (r) return gc_gpu_fail(api, e, GC_EDEVICE, r, api->module_function.name);
  gc_kernel_t *k = gc_calloc(1, sizeof *k, e);
  if (!k) return GC_ENOMEM;
  k->fn = fn;
  int lim = 0; /* CUDA, unasked: 48 KiB less the kernel's static shared memory */
  if (api->func_shmem.fn && api->func_shmem.fn(&lim, fn)) lim = 0;
  k->shmem_granted = lim > 0 ? (unsigned)lim : 0;
  *out = k;
  return GC_OK;
}

/* Each dimension must be 1 .. 2^32-1 (the vendor's own limits, e.g. 1024
 * threads a block, are checked by its launch). */
static int check_dims(const int64_t v[3], const char *what, unsigned out[3], gc_err_t *e) {
  for (int i = 0; i < 3; i++) {
    if (v[i] < 1 || v[i] > (int64_t)UINT32_MAX)
      return gc_err_set(e, GC_ELAUNCH, "%s dimension %d is %lld: must be 1 .. %u", what, i,
                        (long long)v[i], UINT32_MAX);
    out[i] = (unsigned)v[i];
  }
  return GC_OK;
}

/* A block gets at most max_shmem bytes of shared memory; where the vendor
 * asks for an opt-in (func_set_shmem), more than the function was granted
 * is granted first. */
static int grant_shmem(gc_gpu_dev_t *d, gc_kernel_t *k, size_t shmem, gc_err_t *e) {
  if (shmem <= k->shmem_granted) return GC_OK;
  if (shmem > (size_t)d->max_shmem)
    return gc_err_set(e, GC_ELAUNCH,
                      "launch asks for %zu bytes of %s; this %s allows at most %d a block", shmem,
                      d->api->shmem_what, d->base.info.arch, d->max_shmem);
  if (d->api->func_set_shmem.fn) GPU_TRY(d, e, GC_ELAUNCH, func_set_shmem, k->fn, (int)shmem);
  k->shmem_granted = (unsigned)shmem;
  return GC_OK;
}

int gc_gpu_launch(gc_dev_t *dev, gc_kernel_t *k, const int64_t grid[3], const int64_t block[3],
                  size_t shmem, void **args, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  unsigned g[3], b[3];
  int rc;
  if ((rc = check_dims(grid, "grid", g, e)) || (rc = check_dims(block, "block", b, e)) ||
      (rc = gc_gpu_bind(d, e)) || (rc = grant_shmem(d, k, shmem, e)))
    return rc;
  if (k->pdl && d->api->launch_pdl.fn) {
    GPU_TRY(d, e, GC_ELAUNCH, launch_pdl, k->fn, g[0], g[1], g[2], b[0], b[1], b[2],
            (unsigned)shmem, d->stream, args, NULL);
    return GC_OK;
  }
  GPU_TRY(d, e, GC_ELAUNCH, launch, k->fn, g[0], g[1], g[2], b[0], b[1], b[2], (unsigned)shmem,
          d->stream, args, NULL);
  return GC_OK;
}

int gc_gpu_sync(gc_dev_t *dev, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  int rc = no_capture(d, "sync", e);
  if (rc || (rc = gc_gpu_bind(d, e))) return rc;
  GPU_TRY(d, e, GC_EDEVICE, stream_sync, d->stream);
  return GC_OK;
}

/* A caller's stream (its handle at *stream), or the own one (NULL). */
int gc_gpu_set_stream(gc_dev_t *dev, void *const *stream, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  int rc = no_capture(d, "set_stream", e);
  if (!rc) d->stream = stream ? *stream : d->own;
  return rc;
}

int gc_gpu_get_stream(gc_dev_t *dev, void **stream, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  int rc = gc_gpu_bind(d, e);
  *stream = rc ? NULL : d->stream;
  return rc;
}

/* ---- events ---------------------------------------------------------- */

int gc_gpu_event_create(gc_dev_t *dev, gc_event_t **out, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  *out = NULL;
  int rc = gc_gpu_bind(d, e);
  if (rc) return rc;
  gc_event_t *ev = gc_malloc(sizeof *ev, e);
  if (!ev) return GC_ENOMEM;
  gc_gpu_res_t r = d->api->event_create.fn(&ev->ev);
  if (r) {
    free(ev);
    return gc_gpu_fail(d->api, e, GC_EDEVICE, r, d->api->event_create.name);
  }
  *out = ev;
  return GC_OK;
}

void gc_gpu_event_destroy(gc_dev_t *dev, gc_event_t *ev) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  if (!ev) return;
  if (!gc_gpu_bind(d, NULL)) d->api->event_destroy.fn(ev->ev);
  free(ev);
}

/* Allowed in a capture: the record is captured. */
int gc_gpu_event_record(gc_dev_t *dev, gc_event_t *ev, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  int rc = gc_gpu_bind(d, e);
  if (rc) return rc;
  GPU_TRY(d, e, GC_EDEVICE, event_record, ev->ev, d->stream);
  return GC_OK;
}

/* Waits for both events, so a caller need not sync first. */
int gc_gpu_event_elapsed(gc_dev_t *dev, gc_event_t *a, gc_event_t *b, double *ms, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  int rc = no_capture(d, "event timing", e);
  if (rc || (rc = gc_gpu_bind(d, e))) return rc;
  float f = 0;
  GPU_TRY(d, e, GC_EDEVICE, event_sync, a->ev);
  GPU_TRY(d, e, GC_EDEVICE, event_sync, b->ev);
  GPU_TRY(d, e, GC_EDEVICE, event_elapsed, &f, a->ev, b->ev);
  *ms = f;
  return GC_OK;
}

/* ---- graphs ---------------------------------------------------------- */

int gc_gpu_graph_begin(gc_dev_t *dev, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  int rc = gc_gpu_bind(d, e);
  if (rc) return rc;
  if (d->capturing)
    return gc_err_set(e, GC_EINVAL, "a %s graph capture is already open", d->api->vendor);
  GPU_TRY(d, e, GC_EDEVICE, capture_begin, d->stream);
  d->capturing = 1;
  return GC_OK;
}

/* Always ends the capture, also when a call inside it failed (the capture
 * is then invalidated and reported here). */
int gc_gpu_graph_end(gc_dev_t *dev, void **exec, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  const gc_gpu_api_t *api = d->api;
  *exec = NULL;
  int rc = gc_gpu_bind(d, e);
  if (rc) return rc;
  if (!d->capturing) return gc_err_set(e, GC_EINVAL, "no %s graph capture is open", api->vendor);
  d->capturing = 0;
  void *g = NULL, *x = NULL;
  GPU_TRY(d, e, GC_EDEVICE, capture_end, d->stream, &g);
  gc_gpu_res_t r = api->graph_instantiate.fn(&x, g);
  api->graph_destroy.fn(g); /* the executable graph does not need it */
  if (r) return gc_gpu_fail(api, e, GC_EDEVICE, r, api->graph_instantiate.name);
  *exec = x;
  return GC_OK;
}

int gc_gpu_graph_launch(gc_dev_t *dev, void *exec, gc_err_t *e) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  int rc = no_capture(d, "graph launch", e);
  if (rc || (rc = gc_gpu_bind(d, e))) return rc;
  if (!exec) return gc_err_set(e, GC_EINVAL, "no %s graph to launch", d->api->vendor);
  GPU_TRY(d, e, GC_ELAUNCH, graph_launch, exec, d->stream);
  return GC_OK;
}

void gc_gpu_graph_destroy(gc_dev_t *dev, void *exec) {
  gc_gpu_dev_t *d = (gc_gpu_dev_t *)dev;
  if (exec && !gc_gpu_bind(d, NULL)) d->api->graph_exec_destroy.fn(exec);
}
