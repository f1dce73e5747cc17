/* jsonschema_impl.h — a compiled JSON Schema (jsonmode.h's subset) as the
 * recognizer reads it: one table of nodes, each value's kinds and what each
 * kind must be. Private to models/jsonschema.c (which makes it) and
 * models/jsonmode.c (which walks it). */
#ifndef GC_MODELS_JSONSCHEMA_IMPL_H
#define GC_MODELS_JSONSCHEMA_IMPL_H

#include <stdint.h>

#include "jsonmode.h"
#include "regex.h"

/* The kinds of a value, as bits of a node's kinds. Integer is a number
 * without a fraction or an exponent. */
enum { JK_OBJ = 1, JK_ARR = 2, JK_STR = 4, JK_INT = 8, JK_NUM = 16, JK_BOOL = 32, JK_NULL = 64, JK_ALL = 127 };

#define GC_JSON_ANY 0         /* node 0: any value, any keys */
#define GC_JSON_NODES 1024    /* nodes a schema may hold */
#define GC_JSON_PROPS 64      /* properties an object may list (bits of gc_json_fsm_t.seen) */
#define GC_JSON_IMAX 999999999999999999LL /* a bounded integer's largest magnitude: 18 digits */
/* A bounded number (one that may have a fraction) is written with at most
 * GC_JSON_NDIG digits and no exponent, so that its decimal value orders as
 * its double does (15 digits survive the round trip); its value is held
 * exactly in units of 10^-GC_JSON_NDIG. */
#define GC_JSON_NDIG 15

/* The greatest common divisor of a and b (> 0). */
static inline __int128 gcd128(__int128 a, __int128 b) {
  while (b) {
    const __int128 t = a % b;
    a = b, b = t;
  }
  return a;
}

/* Whether some multiple of m (> 0) lies in [lo, hi]. */
static inline int mult_in(__int128 lo, __int128 hi, __int128 m) {
  if (lo > hi) return 0;
  __int128 q = lo / m; /* (toward zero) */
  if (q * m < lo) q++;
  return q * m <= hi;
}

/* 10^k (0 <= k <= 38). */
static inline __int128 p10(int k) {
  __int128 p = 1;
  while (k-- > 0) p *= 10;
  return p;
}

typedef struct gc_json_node {
  uint8_t kinds;     /* JK_* bits the value may be */
  uint8_t open;      /* object: keys other than the listed ones too (their values: addl) */
  int16_t items;     /* array: its items' node past the prefix (GC_JSON_ANY: any) */
  int16_t npre;      /* array: its first items' nodes (prefixItems), props[pre0, pre0 + npre).node */
  int32_t pre0;
  uint32_t minitems, maxitems; /* array: items at least, at most (0, UINT32_MAX: no bound) */
  uint8_t unique;    /* array: uniqueItems, its items one of an enum of strings, true, false or null each
                        at most once (the values written: the level's seen bits) */
  int32_t prop0;     /* object: its properties, props[prop0, prop0 + nprops) */
  int32_t u0;        /* a tagged union of objects (nu > 0): its one property is the tag, whose i-th enum */
  int16_t nu;        /* text chooses the object props[u0 + i].node */
  int32_t nprops;
  uint64_t required; /* bit i: props[prop0 + i] is required */
  int32_t enum0;     /* a value of kinds ekinds is one of the JSON texts strs[enum0, enum0 + nenum) */
  int32_t nenum;     /* (0: no enum) */
  uint8_t ekinds;    /* JK_* bits of the enum's values */
  uint32_t minlen, maxlen; /* string: characters at least, at most (0, UINT32_MAX: no bound) */
  int16_t re;        /* string: its pattern's automaton res[re - 1], which counts minlen .. maxlen too (0: none) */
  uint8_t ibound;    /* integer: only imin .. imax (|each| < 10^18), multiples of imult (1: any) */
  int64_t imin, imax, imult;
  uint8_t nbound;    /* number (with fractions): only nlo .. nhi, multiples of nmult (1: any), in units of
                        10^-15 */
  __int128 nlo, nhi, nmult;
  int16_t addl;      /* object (open): the node of a value whose key is not listed */
  int16_t kre;       /* object (open): its keys' automaton, res[kre - 1] (propertyNames; 0: none) */
  uint8_t mind;      /* levels of containers its smallest value needs (0: a scalar; 255: none fits) */
  uint8_t omind;     /* ... as an object (1 + its required properties' mind) */
  uint8_t amind;     /* ... as an array (1 + the mind of its first minitems items) */
} gc_json_node_t;

typedef struct gc_json_prop { /* a property, or (name "") an array's prefix item */
  char name[GC_JSON_NAME + 1];
  int16_t node;
} gc_json_prop_t;

struct gc_json_schema {
  int refs;              /* references (gc_json_schema_ref); atomic */
  gc_json_node_t *nodes; /* [nnodes]; nodes[0] any, nodes[1] the root */
  int nnodes;
  gc_json_prop_t *props; /* [nprops] */
  int nprops;
  char (*strs)[GC_JSON_LIT + 1]; /* [nstrs] enum and const values' JSON texts */
  int nstrs;
  gc_re_t *res;          /* [nres] patterns' automata (regex.h, GC_RE_SEARCH) */
  int nres;
};

/* Whether some number (integer) node n of s allows can be written: the
 * bounds and multipleOf leave one of the digits it may have
 * (models/jsonmode.c, the walker's own test). */
int gc_json_number_fits(const gc_json_schema_t *s, int n);

#endif
