/* pyjson.h — JSON written as Python's json.dumps(v, ensure_ascii=False)
 * writes it, which is what a chat template's `tojson` gives under Hugging
 * Face's apply_chat_template (and vLLM's, which calls it) and what vLLM's
 * tool parsers put in a call's "arguments": keys in their order, ", " and
 * ": " between items (with indent: "," and newlines), non-ASCII as it is,
 * a float as Python's repr writes it. Here (models/) because it is the
 * chat templates' tojson; gcore-serve writes the request's tools with it. */
#ifndef GC_MODELS_PYJSON_H
#define GC_MODELS_PYJSON_H

#include <json-c/json.h>

#include "../base/base.h"

/* v (NULL: null) appended to b; indent < 0: on one line, else that many
 * spaces a level (json.dumps' indent=N). GC_ENOMEM, else GC_OK. A float
 * that is not finite is written as Python writes it (NaN, Infinity). */
int gc_pyjson(json_object *v, int indent, gc_buf_t *b, gc_err_t *e);

/* The string s [n] as JSON appended to b (json.dumps of a str). */
int gc_pyjson_str(const char *s, size_t n, gc_buf_t *b, gc_err_t *e);

#endif
