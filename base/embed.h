/* embed.h — files compiled into the binaries (templates, preludes, schema
 * migrations), so that the tools are self-contained. The table is written
 * by the Makefile into build/embedded.c from the files in the source tree. */
#ifndef GC_EMBED_H
#define GC_EMBED_H

#include <stddef.h>

typedef struct gc_embed {
  const char *path; /* relative to the repository root, e.g. "templates/cpu/gemm.c" */
  const unsigned char *data;
  size_t size;
} gc_embed_t;

extern const gc_embed_t gc_embedded[];
extern const int gc_embedded_count;

/* The embedded file at path, or NULL. */
const gc_embed_t *gc_embed_find(const char *path);

#endif
