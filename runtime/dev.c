/* dev.c — the device interface: backend selection and the thin dispatch
 * from gc_dev_* to the backend's table. */
#include "dev_impl.h"

#include <string.h>

static const gc_dev_ops_t *const backends[] = {&gc_cpu_ops, &gc_cuda_ops, &gc_hip_ops};

int gc_dev_open(const char *backend, int ordinal, gc_dev_t **out, gc_err_t *e) {
  *out = NULL;
  for (size_t i = 0; i < GC_ARRAY_LEN(backends); i++)
    if (!strcmp(backends[i]->name, backend)) {
      int rc = backends[i]->open(ordinal, out, e);
      if (!rc) (*out)->info.ordinal = ordinal;
      return rc;
    }
  return gc_err_set(e, GC_EINVAL, "unknown backend '%s' (this build has: cpu, cuda, hip)", backend);
}

void gc_dev_close(gc_dev_t *d) {
  if (d) d->ops->close(d);
}
const gc_dev_info_t *gc_dev_info(const gc_dev_t *d) { return &d->info; }
int gc_dev_runs_target(const gc_dev_t *d, const char *t) { return d->ops->runs_target(d, t); }
int gc_dev_alloc(gc_dev_t *d, size_t n, gc_dptr_t *out, gc_err_t *e) {
  return d->ops->alloc(d, n, out, e);
}
void gc_dev_free(gc_dev_t *d, gc_dptr_t p) {
  if (p) d->ops->free(d, p);
}
int gc_dev_upload(gc_dev_t *d, gc_dptr_t dst, const void *src, size_t n, gc_err_t *e) {
  return d->ops->upload(d, dst, src, n, e);
}
int gc_dev_download(gc_dev_t *d, void *dst, gc_dptr_t src, size_t n, gc_err_t *e) {
  return d->ops->download(d, dst, src, n, e);
}
int gc_dev_memset(gc_dev_t *d, gc_dptr_t dst, int byte, size_t n, gc_err_t *e) {
  return d->ops->memset(d, dst, byte, n, e);
}

int gc_dev_copy(gc_dev_t *d, gc_dptr_t dst, gc_dptr_t src, size_t n, gc_err_t *e) {
  return d->ops->copy(d, dst, src, n, e);
}
int gc_dev_flush(gc_dev_t *d, gc_dptr_t buf, size_t n, gc_err_t *e) {
  return d->ops->flush ? d->ops->flush(d, buf, n, e) : d->ops->memset(d, buf, 0x5A, n, e);
}
/* ---- running ahead: put32, post, take ---------------------------------- */

int gc_dev_put32(gc_dev_t *d, gc_dptr_t dst, uint32_t v, gc_err_t *e) {
  if (dst % 4)
    return gc_err_set(e, GC_EINVAL, "put32: address %#llx is not 4-byte aligned",
                      (unsigned long long)dst);
  return d->ops->put32 ? d->ops->put32(d, dst, v, e) : d->ops->upload(d, dst, &v, sizeof v, e);
}

static int check_box(const char *what, int box, size_t n, gc_err_t *e) {
  if (box < 0 || box >= GC_DEV_BOXES)
    return gc_err_set(e, GC_EINVAL, "%s: box %d is not one of 0 .. %d", what, box, GC_DEV_BOXES - 1);
  if (n < 1 || n > GC_DEV_BOX_BYTES)
    return gc_err_set(e, GC_EINVAL, "%s: %zu bytes; a box holds 1 .. %d", what, n, GC_DEV_BOX_BYTES);
  return GC_OK;
}

int gc_dev_post(gc_dev_t *d, int box, gc_dptr_t src, size_t n, gc_err_t *e) {
  if (check_box("post", box, n, e)) return e->code;
  int rc = d->ops->post ? d->ops->post(d, box, src, n, e) : d->ops->download(d, d->box[box], src, n, e);
  if (!rc) d->box_n[box] = n;
  return rc;
}

int gc_dev_take(gc_dev_t *d, int box, void *dst, size_t n, gc_err_t *e) {
  if (check_box("take", box, n, e)) return e->code;
  if (d->box_n[box] != n)
    return d->box_n[box] ? gc_err_set(e, GC_EINVAL, "take: box %d holds %zu bytes, not %zu", box,
                                      d->box_n[box], n)
                         : gc_err_set(e, GC_EINVAL, "take: box %d is empty", box);
  d->box_n[box] = 0;
  if (d->ops->take) return d->ops->take(d, box, dst, n, e);
  memcpy(dst, d->box[box], n);
  return GC_OK;
}

int gc_dev_box_addr(gc_dev_t *d, int box, gc_dptr_t *out, gc_err_t *e) {
  if (check_box("box_addr", box, 4, e)) return e->code;
  if (d->ops->box_addr) return d->ops->box_addr(d, box, out, e);
  if (d->ops->post) /* boxes of its own, not visible to the device */
    return gc_err_set(e, GC_EUNSUPPORTED, "the %s backend's boxes are not visible to the device", d->ops->name);
  *out = (gc_dptr_t)(uintptr_t)d->box[box];
  return GC_OK;
}

int gc_dev_mark(gc_dev_t *d, int box, gc_err_t *e) {
  if (check_box("mark", box, 4, e)) return e->code;
  if (d->ops->mark && d->ops->mark(d, box, e)) return e->code;
  d->box_n[box] = 4;
  return GC_OK;
}

void *gc_dev_host_ptr(gc_dev_t *d, gc_dptr_t p) { return d->ops->host_ptr(d, p); }
size_t gc_dev_page_size(gc_dev_t *d) { return d->ops->page_size ? d->ops->page_size(d) : 0; }
int gc_dev_protect(gc_dev_t *d, gc_dptr_t p, size_t n, int prot, gc_err_t *e) {
  size_t pg = gc_dev_page_size(d);
  if (!pg || !d->ops->protect)
    return gc_err_set(e, GC_EUNSUPPORTED, "the %s backend cannot protect memory", d->ops->name);
  if (p % pg || n % pg)
    return gc_err_set(e, GC_EINVAL, "protect: %zu bytes at %#llx are not whole pages of %zu",
                      n, (unsigned long long)p, pg);
  return d->ops->protect(d, p, n, prot, e);
}
int gc_dev_module_load(gc_dev_t *d, const void *code, size_t n, gc_module_t **out,
                       gc_err_t *e) {
  return d->ops->module_load(d, code, n, out, e);
}
void gc_dev_module_unload(gc_dev_t *d, gc_module_t *m) {
  if (m) d->ops->module_unload(d, m);
}
int gc_dev_kernel(gc_dev_t *d, gc_module_t *m, const char *name, gc_kernel_t **out,
                  gc_err_t *e) {
  return d->ops->kernel(d, m, name, out, e);
}
int gc_dev_launch(gc_dev_t *d, gc_kernel_t *k, const int64_t grid[3],
                  const int64_t block[3], size_t shmem, void **args, gc_err_t *e) {
  for (int i = 0; i < 3; i++)
    if (grid[i] < 1 || block[i] < 0)
      return gc_err_set(e, GC_ELAUNCH, "launch geometry %lldx%lldx%lld / %lldx%lldx%lld is invalid",
                        (long long)grid[0], (long long)grid[1], (long long)grid[2],
                        (long long)block[0], (long long)block[1], (long long)block[2]);
  return d->ops->launch(d, k, grid, block, shmem, args, e);
}
int gc_dev_kernel_pdl(gc_dev_t *d, gc_kernel_t *k, int on) {
  return d->ops->kernel_pdl ? d->ops->kernel_pdl(d, k, on) : 0;
}
int gc_dev_sync(gc_dev_t *d, gc_err_t *e) { return d->ops->sync(d, e); }
int gc_dev_stream(gc_dev_t *d, void **stream, gc_err_t *e) {
  *stream = NULL;
  return d->ops->get_stream ? d->ops->get_stream(d, stream, e) : GC_OK;
}
int gc_dev_set_stream(gc_dev_t *d, void *const *stream, gc_err_t *e) {
  if (d->ops->set_stream) return d->ops->set_stream(d, stream, e);
  if (stream && *stream)
    return gc_err_set(e, GC_EINVAL, "the %s backend has no streams: pass no stream (NULL)",
                      d->ops->name);
  return GC_OK;
}
int gc_dev_event_create(gc_dev_t *d, gc_event_t **out, gc_err_t *e) {
  return d->ops->event_create(d, out, e);
}
void gc_dev_event_destroy(gc_dev_t *d, gc_event_t *ev) {
  if (ev) d->ops->event_destroy(d, ev);
}
int gc_dev_event_record(gc_dev_t *d, gc_event_t *ev, gc_err_t *e) {
  return d->ops->event_record(d, ev, e);
}
int gc_dev_event_elapsed(gc_dev_t *d, gc_event_t *a, gc_event_t *b, double *ms,
                         gc_err_t *e) {
  return d->ops->event_elapsed(d, a, b, ms, e);
}

int gc_dev_tmap_encode(gc_dev_t *d, const gc_tmap_spec_t *s, gc_dtype_t dtype, gc_dptr_t ptr,
                       void *out, gc_err_t *e) {
  if (!d->ops->tmap_encode)
    return gc_err_set(e, GC_EUNSUPPORTED, "the %s backend has no tensor maps (a kernel with "
                      "@tensormap runs on cuda only)", d->ops->name);
  return d->ops->tmap_encode(d, s, dtype, ptr, out, e);
}

static int no_graphs(gc_dev_t *d, gc_err_t *e) {
  return gc_err_set(e, GC_EUNSUPPORTED, "the %s backend has no graphs", d->ops->name);
}

int gc_dev_graph_begin(gc_dev_t *d, gc_err_t *e) {
  if (!d->ops->graph_begin) return no_graphs(d, e);
  return d->ops->graph_begin(d, e);
}

int gc_dev_graph_end(gc_dev_t *d, gc_graph_t **out, gc_err_t *e) {
  void *exec = NULL;
  *out = NULL;
  if (!d->ops->graph_end) return no_graphs(d, e);
  if (d->ops->graph_end(d, &exec, e)) return e->code;
  *out = exec;
  return GC_OK;
}

int gc_dev_graph_launch(gc_dev_t *d, gc_graph_t *g, gc_err_t *e) {
  if (!d->ops->graph_launch) return no_graphs(d, e);
  return d->ops->graph_launch(d, g, e);
}

void gc_dev_graph_destroy(gc_dev_t *d, gc_graph_t *g) {
  if (g && d->ops->graph_destroy) d->ops->graph_destroy(d, g);
}
