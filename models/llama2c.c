/* llama2c.c — maps a legacy llama2.c checkpoint and carves the fp32 arrays
 * out of it in file order. The header is checked by the config layer; the
 * file size is then compared exactly with what the header implies. */
#include "llama2c.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tensor bytes are handed out as they lie in the file (little-endian). */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "gcore reads little-endian weight files in place");

#define L2C_MAGIC_AK42 0x616b3432u /* newer exports: "ak42" then version */

/* Number of floats in each array, in file order; 0 for absent wcls. */
typedef struct {
  uint64_t emb, layer_vec, wq, wkv, wo, ffn_up, ffn_down, final_vec, freq, wcls;
} l2c_counts_t;

static void l2c_counts(const gc_llama_config_t *c, l2c_counts_t *n) {
  uint64_t L = (uint64_t)c->n_layers, D = (uint64_t)c->dim, H = (uint64_t)c->hidden_dim;
  uint64_t V = (uint64_t)c->vocab_size, hd = (uint64_t)c->head_dim;
  /* The GC_LLAMA_MAX_* bounds keep each product far below 2^64. */
  n->emb = V * D;
  n->layer_vec = L * D;
  n->wq = L * D * ((uint64_t)c->n_heads * hd);
  n->wkv = L * D * ((uint64_t)c->n_kv_heads * hd);
  n->wo = n->wq;
  n->ffn_up = L * H * D;
  n->ffn_down = L * D * H;
  n->final_vec = D;
  n->freq = (uint64_t)c->max_seq * hd / 2; /* freq_cis_real, then as many imag */
  n->wcls = c->tie_word_embeddings ? 0 : V * D;
}

uint64_t gc_llama2c_expected_size(const gc_llama_config_t *c) {
  if (gc_llama_config_check(c, NULL) != GC_OK || c->dim != c->n_heads * c->head_dim) return 0;
  l2c_counts_t n;
  l2c_counts(c, &n);
  uint64_t floats = n.emb + 2 * n.layer_vec + n.wq + 2 * n.wkv + n.wo + 2 * n.ffn_up + n.ffn_down +
                    n.final_vec + 2 * n.freq + n.wcls;
  return GC_LLAMA2C_HEADER_BYTES + 4 * floats;
}

static uint32_t l2c_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Point the arrays of m into the mapping, in file order. */
static void l2c_carve(gc_llama2c_t *m) {
  l2c_counts_t n;
  l2c_counts(&m->cfg, &n);
  const float *p = (const float *)((const uint8_t *)m->map + GC_LLAMA2C_HEADER_BYTES);
  m->token_embedding = p, p += n.emb;
  m->rms_att = p, p += n.layer_vec;
  m->wq = p, p += n.wq;
  m->wk = p, p += n.wkv;
  m->wv = p, p += n.wkv;
  m->wo = p, p += n.wo;
  m->rms_ffn = p, p += n.layer_vec;
  m->w1 = p, p += n.ffn_up;
  m->w2 = p, p += n.ffn_down;
  m->w3 = p, p += n.ffn_up;
  m->rms_final = p, p += n.final_vec;
  p += 2 * n.freq;
  m->wcls = m->cfg.tie_word_embeddings ? m->token_embedding : p;
}

/* Validate the mapped bytes of m: header, then exact size. */
static int l2c_validate(gc_llama2c_t *m, gc_err_t *e) {
  const uint8_t *b = m->map;
  if (m->map_size < GC_LLAMA2C_HEADER_BYTES)
    return gc_err_set(e, GC_ECORRUPT, "%s: truncated llama2.c checkpoint: %zu bytes, less than the %d-byte header",
                      m->path, m->map_size, GC_LLAMA2C_HEADER_BYTES);
  if (l2c_le32(b) == L2C_MAGIC_AK42)
    return gc_err_set(e, GC_EUNSUPPORTED,
                      "%s: llama2.c export version %d ('ak42' magic) is not supported; export with the legacy "
                      "format (version 0)", m->path, (int)(int32_t)l2c_le32(b + 4));
  int32_t hdr[7];
  for (int i = 0; i < 7; i++) hdr[i] = (int32_t)l2c_le32(b + 4 * i);
  int rc = gc_llama_config_from_llama2c(hdr, &m->cfg, e);
  if (rc) {
    if (e) gc_err_prefix(e, "%s", m->path);
    return rc;
  }
  uint64_t want = gc_llama2c_expected_size(&m->cfg);
  if (want == 0) return gc_err_set(e, GC_ECORRUPT, "%s: llama2.c header describes no valid model", m->path);
  if ((uint64_t)m->map_size != want)
    return gc_err_set(e, GC_ECORRUPT,
                      "%s: %s llama2.c checkpoint: the header implies %llu bytes but the file has %zu "
                      "(%s %llu bytes)", m->path, (uint64_t)m->map_size < want ? "truncated" : "oversized",
                      (unsigned long long)want, m->map_size,
                      (uint64_t)m->map_size < want ? "missing" : "extra",
                      (unsigned long long)((uint64_t)m->map_size < want ? want - m->map_size : m->map_size - want));
  l2c_carve(m);
  return GC_OK;
}

static int l2c_map(gc_llama2c_t *m, gc_err_t *e) {
  int fd = open(m->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return gc_err_set(e, errno == ENOENT ? GC_ENOTFOUND : GC_EIO, "%s: cannot open: %s", m->path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return gc_err_set(e, GC_EIO, "%s: not a readable regular file", m->path);
  }
  if (sb.st_size < GC_LLAMA2C_HEADER_BYTES) {
    close(fd);
    return gc_err_set(e, GC_ECORRUPT, "%s: truncated llama2.c checkpoint: %lld bytes, less than the %d-byte header",
                      m->path, (long long)sb.st_size, GC_LLAMA2C_HEADER_BYTES);
  }
  if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
    close(fd);
    return gc_err_set(e, GC_EIO, "%s: too large to map", m->path);
  }
  void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) return gc_err_set(e, GC_EIO, "%s: mmap failed: %s", m->path, strerror(err));
  m->map = p;
  m->map_size = (size_t)sb.st_size;
  return GC_OK;
}

int gc_llama2c_open(const char *path, gc_llama2c_t **out, gc_err_t *e) {
  *out = NULL;
  if (!path || !*path) return gc_err_set(e, GC_EINVAL, "gc_llama2c_open: empty path");
  gc_llama2c_t *m = gc_calloc(1, sizeof *m, e);
  if (!m) return GC_ENOMEM;
  m->path = gc_strdup(path, e);
  int rc = m->path ? l2c_map(m, e) : GC_ENOMEM;
  if (!rc) rc = l2c_validate(m, e);
  if (rc) {
    gc_llama2c_close(m);
    return rc;
  }
  *out = m;
  return GC_OK;
}

void gc_llama2c_close(gc_llama2c_t *m) {
  if (!m) return;
  if (m->map) munmap(m->map, m->map_size);
  free(m->path);
  free(m);
}
