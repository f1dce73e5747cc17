/* http.h — gcore-serve's HTTP side: libmicrohttpd with a thread per
 * connection, the routes of the OpenAI API (serve/api.h) in front of the
 * engine (serve/engine.h). See http.c for the threading. */
#ifndef GC_SERVE_HTTP_H
#define GC_SERVE_HTTP_H

#include "api.h"
#include "engine.h"

typedef struct gc_http_opts {
  const char *host;        /* address to listen on ("127.0.0.1", "::1", "0.0.0.0", a name) */
  int port;                /* 0: any free port (gc_http_port says which) */
  size_t max_body;         /* request bodies over this many bytes get 413 */
  int max_connections;     /* connections at once; more are refused */
  int verbose;             /* one line per request on stderr */
  const char *api_key;     /* NULL, or every route but /health (and CORS preflights) needs
                              "Authorization: Bearer KEY" (or llama.cpp's "X-Api-Key: KEY"): 401 */
} gc_http_opts_t;

typedef struct gc_http gc_http_t;

/* Listen and serve requests through api and en (both outlive the server).
 * Errors: GC_EINVAL for a host that does not resolve, GC_EIO when the
 * address cannot be bound (naming it). */
int gc_http_start(const gc_http_opts_t *o, gc_api_t *api, gc_engine_t *en, gc_http_t **out,
                  gc_err_t *e);
int gc_http_port(const gc_http_t *h);
/* Close the listening socket and every connection; waits for their
 * threads (stop the engine first, so that none waits for a token). The
 * answers of requests still open are sent first (up to 10 s). */
void gc_http_stop(gc_http_t *h);

#endif
