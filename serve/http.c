/* http.c — the HTTP side of gcore-serve on libmicrohttpd.
 *
 * Threads. libmicrohttpd's own thread accepts connections and gives each
 * its own thread (MHD_USE_THREAD_PER_CONNECTION), which runs `handle` for
 * each request on it; the callbacks of a connection may block, since only
 * that connection waits. A completion request is parsed and checked
 * (serve/api.c) into one engine request per choice (n of each prompt of a
 * batch; they share one lock and condition variable), queued to the
 * engine all or none (serve/engine.c), and then:
 *   - without `stream`, the handler waits on that condition variable
 *     until every choice is done and answers with the whole JSON;
 *   - with `stream`, the handler answers at once with a response whose
 *     body comes from `stream_read`, called on the connection's thread
 *     whenever the socket can take more: it waits for new text the same
 *     way and writes it as server-sent events (`data: {...}\n\n`, then
 *     `data: [DONE]`), chunked.
 * While it waits, the thread looks at the socket every 100 ms: a client
 * that closed its end cancels the request (gc_engine_cancel), so its slot
 * is freed at the engine's next step, and the connection is closed. A
 * request's context (hreq_t) is held by the connection (released in
 * `completed`) and by a streaming response (released in `stream_free`).
 *
 * Limits: a body over max_body gets 413 (at once when Content-Length says
 * so, else once the rest has been read and dropped); a full queue 503 with
 * Retry-After; connections over max_connections are refused by MHD.
 *
 * Browsers: every answer allows any origin (Access-Control-Allow-Origin: *),
 * and OPTIONS on a route is a CORS preflight (204). A route may end in '/'. */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

struct gc_http {
  gc_http_opts_t o;
  gc_api_t *api;
  gc_engine_t *en;
  struct MHD_Daemon *d;
  int port;
  atomic_ullong ids; /* response ids */
  atomic_int open;   /* requests begun and not yet completed (their answer not yet sent) */
  atomic_int up;     /* the daemon started: before, a failure is gc_http_start's one error line */
  /* /metrics: the completions and chats answered (their answer sent), by
   * status class [1xx .. 5xx], and their tokens as their usage counts them */
  atomic_ullong answered[6], prompt_tokens, cached_tokens, generated_tokens;
  /* and their latencies: the first token of each choice after the request
   * arrived, the whole answer (sent) of each that succeeded */
  gc_srv_hist_t ttft, e2e;
};

enum { R_NONE, R_HEALTH, R_METRICS, R_MODELS, R_MODEL, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE };
enum { S_SENDING, S_DONE }; /* a stream's phase */

/* Seconds a stream may have nothing to send before it sends an SSE
 * comment (": keep-alive", which SSE clients skip): a stream queued
 * behind long generations, or waiting for a long prompt's first token,
 * would otherwise be idle past the connection timeout (CONN_TIMEOUT_S,
 * counted from the socket's last activity) and be closed without a word. */
enum { KEEPALIVE_S = 15, CONN_TIMEOUT_S = 120 };

typedef struct hreq {
  gc_http_t *h;
  struct MHD_Connection *conn;
  atomic_int refs;          /* the connection, and a streaming response */
  int route;
  size_t ulen;              /* the URL's length without a trailing '/' */
  char line[96];            /* "METHOD /path", for the log */
  gc_buf_t body;
  int too_big;
  int status;               /* the answer's, for the log */
  gc_srv_req_t **rs;        /* [nr] a queued completion's choices (rs[0] leads: one lock, *rs[0]->mu) */
  int nr;
  gc_api_req_t q;
  char id[64];
  int64_t created;
  double t0;
  /* a stream */
  int phase;
  gc_buf_t out;             /* events not yet written to the socket */
  size_t out_off;
  double sent_at;           /* gc_now() of the last bytes handed to the socket (0: none yet) */
  struct sent {             /* [nr] what each choice has sent */
    size_t text;            /* bytes of its text sent (a chat's: up to the end of its answer sent) */
    size_t reason;          /* a chat's: up to the end of its reasoning sent */
    size_t chars;           /* gc_api_token_chars of its positions sent: logprobs' text_offset */
    int ids;                /* its ids */
    int calls;              /* a chat's tool calls sent */
    int started, finished;  /* its first chunk (role or echo), its last */
  } *sent;
} hreq_t;

static void hreq_release(hreq_t *x) {
  if (atomic_fetch_sub(&x->refs, 1) != 1) return;
  for (int i = x->nr; i-- > 0;) { /* the leader, rs[0], last */
    gc_srv_req_t *r = x->rs[i];
    pthread_mutex_lock(r->mu);
    int done = r->done;
    pthread_mutex_unlock(r->mu);
    if (!done) gc_engine_cancel(x->h->en, r);
    gc_srv_req_release(r);
  }
  free(x->rs);
  free(x->sent);
  gc_buf_free(&x->body);
  gc_buf_free(&x->out);
  free(x);
}

/* ---- answers ------------------------------------------------------------------ */

/* The methods of x's route, as Allow and Access-Control-Allow-Methods say them. */
static const char *methods(const hreq_t *x) {
  return x->route >= R_COMPLETIONS ? "POST, OPTIONS" : "GET, HEAD, OPTIONS";
}

/* The headers every answer has (CORS: any origin), and Allow with a 405. */
static void common_headers(hreq_t *x, struct MHD_Response *resp, int status) {
  MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, methods(x));
}

static enum MHD_Result send_json(hreq_t *x, int status, char *json) {
  static const char oom[] = "{\"error\": {\"message\": \"out of memory\", \"type\": \"server_error\", "
                            "\"param\": null, \"code\": null}}";
  struct MHD_Response *resp = json ? MHD_create_response_from_buffer(strlen(json), json, MHD_RESPMEM_MUST_FREE)
                                   : MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom,
                                                                     MHD_RESPMEM_PERSISTENT);
  if (!resp) {
    free(json);
    return MHD_NO;
  }
  if (!json) status = 500;
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
  if (status == MHD_HTTP_SERVICE_UNAVAILABLE) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  if (status == MHD_HTTP_UNAUTHORIZED) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
  common_headers(x, resp, status);
  x->status = status;
  enum MHD_Result rc = MHD_queue_response(x->conn, (unsigned)status, resp);
  MHD_destroy_response(resp);
  return rc;
}

/* /metrics: Prometheus' text format (version 0.0.4), names as vLLM's and
 * llama.cpp's servers name theirs, under gcore:. */
/* Histogram h as Prometheus's text: cumulative buckets, sum, count. */
static int print_hist(gc_buf_t *b, const char *name, const char *help, const gc_srv_hist_t *h) {
  int rc = gc_buf_printf(b, NULL, "# HELP gcore:%s %s\n# TYPE gcore:%s histogram\n", name, help, name);
  unsigned long long c = 0;
  for (int i = 0; !rc && i <= GC_SRV_NLE; i++) {
    c += atomic_load(&h->n[i]);
    if (i < GC_SRV_NLE) rc = gc_buf_printf(b, NULL, "gcore:%s_bucket{le=\"%g\"} %llu\n", name, gc_srv_le[i], c);
    else rc = gc_buf_printf(b, NULL, "gcore:%s_bucket{le=\"+Inf\"} %llu\n", name, c);
  }
  if (!rc)
    rc = gc_buf_printf(b, NULL, "gcore:%s_sum %.9f\ngcore:%s_count %llu\n", name,
                       (double)atomic_load(&h->sum_ns) * 1e-9, name, c);
  return rc;
}

static enum MHD_Result send_metrics(hreq_t *x) {
  gc_http_t *h = x->h;
  int active, queued;
  gc_engine_load(h->en, &active, &queued);
  gc_buf_t b = {0};
  int rc = gc_buf_printf(
      &b, NULL,
      "# HELP gcore:prompt_tokens_total Prompt tokens of the answered requests (a prompt once, however many choices).\n"
      "# TYPE gcore:prompt_tokens_total counter\ngcore:prompt_tokens_total %llu\n"
      "# HELP gcore:prompt_tokens_cached_total Of those, the tokens a slot's prompt cache held.\n"
      "# TYPE gcore:prompt_tokens_cached_total counter\ngcore:prompt_tokens_cached_total %llu\n"
      "# HELP gcore:generation_tokens_total Tokens generated for the answered requests (every choice's).\n"
      "# TYPE gcore:generation_tokens_total counter\ngcore:generation_tokens_total %llu\n"
      "# HELP gcore:requests_total Completions and chats answered, by the class of their HTTP status.\n"
      "# TYPE gcore:requests_total counter\n",
      (unsigned long long)atomic_load(&h->prompt_tokens), (unsigned long long)atomic_load(&h->cached_tokens),
      (unsigned long long)atomic_load(&h->generated_tokens));
  for (int c = 2; !rc && c <= 5; c++)
    rc = gc_buf_printf(&b, NULL, "gcore:requests_total{status=\"%dxx\"} %llu\n", c,
                       (unsigned long long)atomic_load(&h->answered[c]));
  if (!rc)
    rc = gc_buf_printf(&b, NULL,
                       "# HELP gcore:requests_running Requests in a slot, decoding.\n"
                       "# TYPE gcore:requests_running gauge\ngcore:requests_running %d\n"
                       "# HELP gcore:requests_waiting Requests queued for a slot.\n"
                       "# TYPE gcore:requests_waiting gauge\ngcore:requests_waiting %d\n"
                       "# HELP gcore:slots Requests decoded at once (--parallel).\n"
                       "# TYPE gcore:slots gauge\ngcore:slots %d\n",
                       active, queued, gc_engine_parallel(h->en));
  if (!rc)
    rc = print_hist(&b, "time_to_first_token_seconds",
                    "From a completion's or chat's arrival to each choice's first token.", &h->ttft);
  if (!rc)
    rc = print_hist(&b, "inter_token_latency_seconds", "Between a reply's tokens, each after the first.",
                    gc_engine_itl(h->en));
  if (!rc)
    rc = print_hist(&b, "e2e_request_latency_seconds",
                    "From a completion's or chat's arrival to its answer sent, of those answered 200.", &h->e2e);
  if (rc) {
    gc_buf_free(&b);
    return send_json(x, 500, NULL);
  }
  struct MHD_Response *resp = MHD_create_response_from_buffer(b.len, b.data, MHD_RESPMEM_MUST_FREE);
  if (!resp) {
    gc_buf_free(&b);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
  common_headers(x, resp, 200);
  x->status = 200;
  enum MHD_Result r = MHD_queue_response(x->conn, 200, resp);
  MHD_destroy_response(resp);
  return r;
}

static enum MHD_Result send_error(hreq_t *x, const gc_api_err_t *err) {
  return send_json(x, err->status, gc_api_error_json(err));
}

static enum MHD_Result fail(hreq_t *x, int status, const char *type, const char *code, const char *fmt,
                            const char *arg) {
  gc_api_err_t err;
  gc_api_fail(&err, status, type, code, NULL, fmt, arg);
  return send_error(x, &err);
}

/* A CORS preflight: 204, the route's methods, and the headers the browser
 * asks for (Access-Control-Request-Headers), else Content-Type and
 * Authorization. */
static enum MHD_Result preflight(hreq_t *x) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
  if (!resp) return MHD_NO;
  const char *asked = MHD_lookup_connection_value(x->conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
  common_headers(x, resp, MHD_HTTP_NO_CONTENT);
  MHD_add_response_header(resp, "Access-Control-Allow-Methods", methods(x));
  if (!asked || !*asked || MHD_add_response_header(resp, "Access-Control-Allow-Headers", asked) != MHD_YES)
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Content-Type, Authorization");
  MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
  x->status = MHD_HTTP_NO_CONTENT;
  enum MHD_Result rc = MHD_queue_response(x->conn, MHD_HTTP_NO_CONTENT, resp);
  MHD_destroy_response(resp);
  return rc;
}

/* ---- the client ---------------------------------------------------------------- */

/* Has the client closed its end of the connection? (EOF, its shutdown of
 * writing (POLLRDHUP, even with bytes it sent before still unread: a
 * client that pipelined a byte and left) or an error on the socket; bytes
 * of a next request alone are not a close. A client that shuts down its
 * writing and waits to read counts as gone too, as uvicorn's (vLLM's)
 * server counts it.) */
static int client_gone(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!ci) return 0;
  struct pollfd p = {ci->connect_fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return 0;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return 1;
  char b;
  ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Wait (*r->mu held) up to 100 ms for r, or a choice that shares its
 * lock, to change. */
static void wait_a_little(gc_srv_req_t *r) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 100 * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  pthread_cond_timedwait(r->cv, r->mu, &ts);
}

/* ---- streams --------------------------------------------------------------------- */

/* Append "data: json\n\n" (json freed); 0, or -1 on out-of-memory. */
static int event(hreq_t *x, char *json) {
  gc_err_t e = {0};
  int rc = !json || gc_buf_printf(&x->out, &e, "data: %s\n\n", json) ? -1 : 0;
  free(json);
  return rc;
}

/* The events choice i's progress allows (its lock held): its first chunk
 * (a chat's role, or the echo once the prompt's logprobs are in: with the
 * first token), new text and ids, its last chunk; a failure's error event.
 * Returns 1 when it wrote any, 0 when there is nothing new, 2 after an
 * error event (the stream ends), -1 on out-of-memory. */
static int choice_events(hreq_t *x, int i) {
  gc_srv_req_t *r = x->rs[i];
  struct sent *s = &x->sent[i];
  gc_api_t *a = x->h->api;
  int wrote = 0;
  if (s->finished) return 0;
  if (!s->started && x->q.echo && !r->status) {
    if (!r->nids && !r->done && r->p.prompt_logprobs) return 0; /* the echo waits for the prompt's logprobs */
    gc_api_chunk_t k = {.text = r->echo ? r->echo : "", .n = r->necho, .echo = 1};
    if (event(x, gc_api_chunk_json(a, &x->q, x->id, x->created, r, &k))) return -1;
    s->chars = gc_api_token_chars(a, r, 0, r->nprompt);
    wrote = 1;
  } else if (!s->started && x->q.chat) {
    if (event(x, gc_api_chunk_json(a, &x->q, x->id, x->created, r, &(gc_api_chunk_t){.text = "", .role = 1})))
      return -1;
    wrote = 1;
  }
  s->started = 1;
  int new_ids = (x->q.return_ids || r->p.logprobs >= 0) && r->nids > s->ids;
  const char *t = r->text.data ? r->text.data : "";
  gc_api_parts_t p = {.end = r->ready}; /* a chat's reasoning and answer so far */
  if (x->q.chat) gc_api_reply_parts(a, t, r->ready, r->done, &p);
  size_t r0 = p.r0 > s->reason ? p.r0 : s->reason, c0 = p.c0 > s->text ? p.c0 : s->text, next = p.end;
  gc_buf_t answer = {0}; /* with tools: the answer's text new since the last chunk, and its calls */
  json_object *calls = x->q.tools ? json_object_new_array() : NULL;
  int ncalls = s->calls;
  if (calls) next = gc_api_tool_walk(gc_api_reply_tools(a, r), t, p.c0, c0, p.end, r->done, &answer, calls, &ncalls);
  const char *text = calls ? answer.data : t + c0;
  size_t n = calls ? answer.len : p.end > c0 ? p.end - c0 : 0;
  if (p.r1 > r0 || n || ncalls > s->calls || (new_ids && !r->done)) {
    gc_api_chunk_t k = {.text = text, .n = n, .reasoning = t + r0, .nr = p.r1 > r0 ? p.r1 - r0 : 0,
                        .from = s->ids, .to = r->nids, .offset = s->chars, .calls = ncalls > s->calls ? calls : NULL};
    if (event(x, gc_api_chunk_json(a, &x->q, x->id, x->created, r, &k))) {
      gc_buf_free(&answer);
      json_object_put(calls);
      return -1;
    }
    if (r->p.logprobs >= 0) s->chars += gc_api_token_chars(a, r, r->nprompt + k.from, r->nprompt + k.to);
    s->reason = p.r1 > r0 ? p.r1 : r0, s->ids = r->nids;
    wrote = 1;
  }
  s->text = next > c0 ? next : c0, s->calls = ncalls;
  gc_buf_free(&answer);
  json_object_put(calls);
  if (!r->done) return wrote;
  s->finished = 1;
  if (r->status) { /* failed after the headers went out: an error event */
    gc_api_err_t err;
    gc_api_fail(&err, r->status, "server_error", NULL, NULL, "%s", r->error);
    return event(x, gc_api_error_json(&err)) ? -1 : 2;
  }
  gc_api_chunk_t k = {.text = "", .from = s->ids, .to = r->nids, .offset = s->chars,
                      .finish = gc_api_finish_reason(r, s->calls)};
  if (event(x, gc_api_chunk_json(a, &x->q, x->id, x->created, r, &k))) return -1;
  s->ids = r->nids;
  return 1;
}

/* The events the choices' progress allows (their lock held), each
 * choice's in turn; when all are done (or one failed), usage and [DONE].
 * Returns 1 when it wrote any, 0 when there is nothing new, -1 on
 * out-of-memory. */
static int stream_events(hreq_t *x) {
  int wrote = 0, done = 1;
  for (int i = 0; i < x->nr; i++) {
    int got = choice_events(x, i);
    if (got < 0) return -1;
    wrote |= got != 0;
    done &= x->sent[i].finished;
    if (got == 2) break; /* a failure ends the stream: the other choices are cancelled */
  }
  int failed = 0;
  for (int i = 0; i < x->nr; i++) failed |= x->sent[i].finished && x->rs[i]->status;
  if (!done && !failed) return wrote;
  gc_err_t e = {0};
  if (!failed && x->q.include_usage && event(x, gc_api_usage_json(x->h->api, &x->q, x->id, x->created, x->rs, x->nr)))
    return -1;
  if (gc_buf_printf(&x->out, &e, "data: [DONE]\n\n")) return -1;
  x->phase = S_DONE;
  return 1;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  hreq_t *x = cls;
  (void)pos;
  for (;;) {
    if (x->out_off < x->out.len) {
      size_t n = x->out.len - x->out_off < max ? x->out.len - x->out_off : max;
      memcpy(buf, x->out.data + x->out_off, n);
      x->out_off += n;
      x->sent_at = gc_now();
      return (ssize_t)n;
    }
    x->out.len = x->out_off = 0;
    if (x->phase == S_DONE) return MHD_CONTENT_READER_END_OF_STREAM;
    if (!x->sent_at) x->sent_at = gc_now(); /* the headers have just gone */
    pthread_mutex_lock(x->rs[0]->mu);
    int got = stream_events(x);
    if (!got) wait_a_little(x->rs[0]);
    pthread_mutex_unlock(x->rs[0]->mu);
    if (got < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (!got && client_gone(x->conn)) { /* the engine frees its slot (hreq_release) */
      x->status = 499;
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    gc_err_t e = {0};
    if (!got && gc_now() - x->sent_at >= KEEPALIVE_S && gc_buf_printf(&x->out, &e, ": keep-alive\n\n"))
      return MHD_CONTENT_READER_END_WITH_ERROR;
  }
}

static void stream_free(void *cls) { hreq_release(cls); }

/* ---- completions ---------------------------------------------------------------- */

static enum MHD_Result completion(hreq_t *x) {
  gc_http_t *h = x->h;
  gc_api_err_t err;
  gc_err_t e = {0};
  if (x->too_big) {
    gc_api_fail(&err, 413, "invalid_request_error", NULL, NULL, "the request body is over %zu bytes", h->o.max_body);
    return send_error(x, &err);
  }
  if (gc_api_parse(h->api, x->route == R_CHAT, x->body.data ? x->body.data : "", x->body.len, &x->q, &x->rs, &x->nr,
                   &err))
    return send_error(x, &err);
  if (x->nr > gc_engine_max_queue(h->en)) {
    gc_api_fail(&err, 400, "invalid_request_error", NULL, x->q.n > 1 ? "n" : "prompt",
                "%d choices: more than the queue holds (--max-queue %d)", x->nr, gc_engine_max_queue(h->en));
    return send_error(x, &err);
  }
  if (x->q.stream && !(x->sent = gc_calloc((size_t)x->nr, sizeof *x->sent, &e))) return send_json(x, 500, NULL);
  x->created = (int64_t)time(NULL);
  snprintf(x->id, sizeof x->id, "%s-%llx%06llx", x->q.chat ? "chatcmpl" : "cmpl", (unsigned long long)x->created,
           (unsigned long long)atomic_fetch_add(&h->ids, 1) & 0xffffffull);
  int sub = gc_engine_submit(h->en, x->rs, x->nr);
  if (sub == GC_SUBMIT_FULL)
    return fail(x, 503, "server_error", "overloaded", "%s: every slot is busy and the queue has no room for all "
                "the choices; retry later", "the server is busy");
  if (sub == GC_SUBMIT_STOPPING) return fail(x, 503, "server_error", NULL, "%s", "the server is shutting down");
  if (x->q.stream) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, x,
                                                                  stream_free);
    if (!resp) return MHD_NO;
    atomic_fetch_add(&x->refs, 1); /* the response's */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    common_headers(x, resp, MHD_HTTP_OK);
    x->status = 200;
    enum MHD_Result rc = MHD_queue_response(x->conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return rc;
  }
  gc_srv_req_t *lead = x->rs[0], *failed = NULL;
  pthread_mutex_lock(lead->mu);
  for (;;) { /* every choice done, or one failed */
    int done = 1;
    for (int i = 0; i < x->nr && !failed; i++)
      failed = x->rs[i]->done && x->rs[i]->status ? x->rs[i] : NULL, done &= x->rs[i]->done;
    if (done || failed) break;
    wait_a_little(lead);
    pthread_mutex_unlock(lead->mu);
    if (client_gone(x->conn)) { /* nobody to answer: close (hreq_release cancels them) */
      x->status = 499;
      return MHD_NO;
    }
    pthread_mutex_lock(lead->mu);
  }
  char *json = NULL;
  if (failed) gc_api_fail(&err, failed->status, "server_error", NULL, NULL, "%s", failed->error);
  else json = gc_api_result_json(h->api, &x->q, x->id, x->created, x->rs, x->nr);
  pthread_mutex_unlock(lead->mu);
  return failed ? send_error(x, &err) : send_json(x, 200, json);
}

/* POST /tokenize, /detokenize: answered at once, on this thread. */
static enum MHD_Result tokens(hreq_t *x) {
  gc_http_t *h = x->h;
  gc_api_err_t err;
  if (x->too_big) {
    gc_api_fail(&err, 413, "invalid_request_error", NULL, NULL, "the request body is over %zu bytes", h->o.max_body);
    return send_error(x, &err);
  }
  const char *body = x->body.data ? x->body.data : "";
  char *json = x->route == R_TOKENIZE ? gc_api_tokenize_json(h->api, body, x->body.len, &err)
                                      : gc_api_detokenize_json(h->api, body, x->body.len, &err);
  return json ? send_json(x, 200, json) : send_error(x, &err);
}

/* ---- routing ---------------------------------------------------------------------- */

/* Whether a and b [n] are equal, in a time that does not depend on where
 * they differ. */
static int same_secret(const char *a, size_t na, const char *b, size_t nb) {
  unsigned char d = na != nb;
  for (size_t i = 0; i < nb; i++) d |= (unsigned char)(i < na ? a[i] : 0) ^ (unsigned char)b[i];
  return !d;
}

/* Whether x carries the server's API key (or the server has none). */
static int authorized(const hreq_t *x) {
  const char *key = x->h->o.api_key;
  if (!key) return 1;
  const char *auth = MHD_lookup_connection_value(x->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  const char *alt = MHD_lookup_connection_value(x->conn, MHD_HEADER_KIND, "X-Api-Key");
  const char *given = auth && !strncasecmp(auth, "Bearer ", 7) ? auth + 7 : alt;
  return given && same_secret(given, strlen(given), key, strlen(key));
}

/* Whether url [n] is path. */
static int is_path(const char *url, size_t n, const char *path) { return n == strlen(path) && !memcmp(url, path, n); }

/* The route of url [n] (n: without a trailing '/'). */
static int route_of(const char *url, size_t n) {
  if (is_path(url, n, "/health")) return R_HEALTH;
  if (is_path(url, n, "/metrics")) return R_METRICS;
  if (is_path(url, n, "/v1/models")) return R_MODELS;
  if (n > 11 && !strncmp(url, "/v1/models/", 11)) return R_MODEL;
  if (is_path(url, n, "/v1/completions")) return R_COMPLETIONS;
  if (is_path(url, n, "/v1/chat/completions")) return R_CHAT;
  if (is_path(url, n, "/tokenize")) return R_TOKENIZE;
  if (is_path(url, n, "/detokenize")) return R_DETOKENIZE;
  return R_NONE;
}

static enum MHD_Result answer(hreq_t *x, const char *url, const char *method) {
  gc_http_t *h = x->h;
  int post = !strcmp(method, "POST"), get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
  if (x->route == R_NONE)
    return fail(x, 404, "invalid_request_error", "not_found", "no route %s (see /v1/models, /v1/completions, "
                "/v1/chat/completions, /tokenize, /detokenize, /health, /metrics)", GC_QUOTED(url));
  if (!strcmp(method, "OPTIONS")) return preflight(x);
  if (x->route != R_HEALTH && !authorized(x)) {
    gc_api_err_t err;
    gc_api_fail(&err, 401, "invalid_request_error", "invalid_api_key", NULL,
                "a missing or wrong API key: give \"Authorization: Bearer KEY\"");
    return send_error(x, &err);
  }
  int wants_post = x->route >= R_COMPLETIONS;
  if (wants_post ? !post : !get)
    return fail(x, 405, "invalid_request_error", "method_not_allowed", "%s is not allowed here", method);
  if (x->route == R_HEALTH) {
    int active, queued;
    gc_engine_load(h->en, &active, &queued);
    char *s = gc_aprintf(NULL, "{\"status\": \"ok\", \"slots\": %d, \"active\": %d, \"queued\": %d}",
                         gc_engine_parallel(h->en), active, queued);
    return send_json(x, 200, s);
  }
  if (x->route == R_METRICS) return send_metrics(x);
  if (x->route == R_MODELS) return send_json(x, 200, gc_api_models_json(h->api, NULL));
  if (x->route == R_MODEL) {
    if (!is_path(url + 11, x->ulen - 11, h->api->model_id))
      return fail(x, 404, "invalid_request_error", "model_not_found", "The model %s does not exist", GC_QUOTED(url + 11));
    return send_json(x, 200, gc_api_models_json(h->api, url + 11));
  }
  if (x->route == R_TOKENIZE || x->route == R_DETOKENIZE) return tokens(x);
  return completion(x);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *data, size_t *size, void **ctx) {
  gc_http_t *h = cls;
  hreq_t *x = *ctx;
  (void)version;
  if (!x) { /* the headers: set up, and refuse a body we would not read */
    if (!(x = calloc(1, sizeof *x))) return MHD_NO;
    atomic_init(&x->refs, 1);
    x->ulen = strlen(url);
    if (x->ulen > 1 && url[x->ulen - 1] == '/') x->ulen--;
    x->h = h, x->conn = c, x->t0 = gc_now(), x->route = route_of(url, x->ulen);
    snprintf(x->line, sizeof x->line, "%.10s %s", method, GC_QUOTED(url));
    *ctx = x;
    atomic_fetch_add(&h->open, 1);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > h->o.max_body) {
      x->too_big = 1;
      gc_api_err_t err;
      gc_api_fail(&err, 413, "invalid_request_error", NULL, NULL, "the request body is over %zu bytes", h->o.max_body);
      return send_error(x, &err);
    }
    return MHD_YES;
  }
  if (*size) { /* a piece of the body */
    gc_err_t e = {0};
    if (!x->too_big && x->body.len + *size <= h->o.max_body) {
      if (gc_buf_append(&x->body, data, *size, &e)) return MHD_NO;
    } else {
      x->too_big = 1; /* read and dropped, to answer 413 at the end */
    }
    *size = 0;
    return MHD_YES;
  }
  if (x->status) return MHD_YES; /* answered already (413 on the headers) */
  return answer(x, url, method);
}

static void completed(void *cls, struct MHD_Connection *c, void **ctx, enum MHD_RequestTerminationCode toe) {
  gc_http_t *h = cls;
  hreq_t *x = *ctx;
  (void)c;
  if (!x) return;
  int prompt = 0, passes = 0, gen = 0, cached = 0, reused = 0; /* reused: as usage counts it */
  double now = gc_now(), first[GC_API_MAX_CHOICES];
  for (int i = 0; i < x->nr; i++) {
    pthread_mutex_lock(x->rs[i]->mu);
    prompt += i % x->q.n ? 0 : x->rs[i]->nprompt, passes += x->rs[i]->prefills, gen += x->rs[i]->nids;
    cached += x->rs[i]->cached, reused += i % x->q.n ? 0 : x->rs[i]->cached;
    first[i] = x->rs[i]->t_first;
    pthread_mutex_unlock(x->rs[i]->mu);
  }
  if ((x->route == R_COMPLETIONS || x->route == R_CHAT) && x->status >= 100 && x->status < 600) {
    for (int i = 0; i < x->nr; i++)
      if (first[i] > 0) gc_srv_hist_add(&h->ttft, first[i] - x->t0);
    if (x->status == 200 && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) gc_srv_hist_add(&h->e2e, now - x->t0);
    atomic_fetch_add(&h->answered[x->status / 100], 1);
    atomic_fetch_add(&h->prompt_tokens, (unsigned long long)prompt);
    atomic_fetch_add(&h->cached_tokens, (unsigned long long)reused);
    atomic_fetch_add(&h->generated_tokens, (unsigned long long)gen);
  }
  if (h->o.verbose) {
    const char *why = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed early)";
    fprintf(stderr, "gcore-serve: %s %d%s: %d prompt tokens (%d passes, %d cached) + %d generated, %.3f s%s\n",
            x->line, x->status, x->q.stream ? " (stream)" : "", prompt, passes, cached, gen, now - x->t0, why);
  }
  *ctx = NULL;
  hreq_release(x);
  atomic_fetch_sub(&h->open, 1);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  const gc_http_t *h = cls;
  if (!atomic_load(&h->up)) return; /* a failed start: gc_http_start says why, in one line */
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
  fprintf(stderr, "gcore-serve: libmicrohttpd: %s\n", msg);
}

/* ---- the server -------------------------------------------------------------------- */

int gc_http_start(const gc_http_opts_t *o, gc_api_t *api, gc_engine_t *en, gc_http_t **out, gc_err_t *e) {
  *out = NULL;
  struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  char port[16];
  snprintf(port, sizeof port, "%d", o->port);
  int g = getaddrinfo(o->host, port, &hints, &ai);
  if (g) return gc_err_set(e, GC_EINVAL, "--host %s: %s", GC_QUOTED(o->host), gai_strerror(g));
  gc_http_t *h = gc_calloc(1, sizeof *h, e);
  if (!h) {
    freeaddrinfo(ai);
    return GC_ENOMEM;
  }
  h->o = *o, h->api = api, h->en = en;
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                   MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
  errno = 0;
  h->d = MHD_start_daemon(flags, 0, NULL, NULL, handle, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
                          MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, completed, h,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_TIMEOUT_S, MHD_OPTION_END);
  int err = errno;
  freeaddrinfo(ai);
  if (!h->d) {
    free(h);
    return gc_err_set(e, GC_EIO, "cannot listen on %s port %d%s%s", o->host, o->port, err ? ": " : "",
                      err ? strerror(err) : "");
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
  h->port = di ? di->port : o->port;
  atomic_store(&h->up, 1);
  *out = h;
  return GC_OK;
}

int gc_http_port(const gc_http_t *h) { return h->port; }

void gc_http_stop(gc_http_t *h) {
  if (!h) return;
  /* The engine has answered every request (gc_engine_stop): give their
   * connection threads up to 10 s to send those answers, which stopping
   * the daemon would otherwise cut off. */
  for (double t0 = gc_now(); atomic_load(&h->open) > 0 && gc_now() - t0 < 10.0;)
    nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
  MHD_stop_daemon(h->d);
  free(h);
}
