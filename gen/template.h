/* template.h — kernel templates: their declarations parsed from the
 * opening comment (templates/README.md is the format), enumeration of the
 * parameter space with pruning by constraints, and expansion of one
 * variant into compilable source with a stable variant id. */
#ifndef GC_TEMPLATE_H
#define GC_TEMPLATE_H

#include "../base/expr.h"
#include "../core/problem.h"
#include "../core/tmapspec.h"
#include "target.h"

#define GC_TPL_PARAMS 16
#define GC_TPL_VALUES 32
#define GC_TPL_EXPRS 32
#define GC_TPL_DTYPES 24
#define GC_TPL_OPS 8

typedef struct gc_tparam {
  char name[GC_NAME_MAX];
  int64_t values[GC_TPL_VALUES];
  int nvalues;
  int64_t def;                  /* the declared default (@param ... default D) */
  int64_t opdef[GC_TPL_OPS];    /* the default per op of the template's @op list:
                                 * D, or what an @defaults line gives for that op */
  unsigned opdef_set;           /* bit i: an @defaults line set opdef[i] */
  char doc[160];
} gc_tparam_t;

typedef struct gc_texpr {
  char expr[GC_EXPR_TEXT];
  char doc[160];
} gc_texpr_t;

#define GC_TPL_CDEFS 16

/* An @defaults line with a condition (`... if EXPR`): on a target where
 * EXPR holds for the default variant, its assignments replace the defaults
 * of its ops; the lines apply in order, after the unconditional ones. */
typedef struct gc_tcdef {
  unsigned ops;                  /* bit i: op i of the template's @op list */
  int n;                         /* assignments */
  int param[GC_TPL_PARAMS];      /* which parameter, by index */
  int64_t value[GC_TPL_PARAMS];
  char cond[GC_EXPR_TEXT];
} gc_tcdef_t;

typedef struct gc_template {
  char name[64], op[GC_OP_NAME], backend[8], kernel[64]; /* op: the first of ops */
  char ops[GC_TPL_OPS][GC_OP_NAME]; /* @op lists one or more; GC_OP_<NAME> tells the source which */
  int nops;
  char path[256];               /* where it came from (for #line and messages) */
  char hash[GC_HASH_HEX];       /* of the whole source text */
  char prelude_hash[GC_HASH_HEX]; /* of its backend's prelude (part of variant ids) */
  char *source;                 /* owned, NUL-terminated */
  gc_dtype_t dtypes[GC_TPL_DTYPES][3];
  int ndtypes;
  gc_tparam_t params[GC_TPL_PARAMS];
  int nparams;
  gc_tcdef_t cdefs[GC_TPL_CDEFS]; /* conditional @defaults lines, in order */
  int ncdefs;
  gc_texpr_t constraints[GC_TPL_EXPRS];
  int nconstraints;
  gc_texpr_t applies[8];
  int napplies;
  char grid[GC_EXPR_TEXT], block[GC_EXPR_TEXT]; /* three space-separated expressions each */
  char shmem[GC_EXPR_TEXT];     /* bytes of dynamic shared memory (GPU), "0" if none */
  char tmaps[GC_TMAPS_MAX][GC_TMAP_LINE]; /* @tensormap lines (cuda): trailing kernel args */
  int ntmaps;
  int priority;
  gc_texpr_t cprio[4];          /* `@priority N if EXPR` lines, in order: the first whose */
  int cprio_value[4];           /* EXPR holds gives N (else priority) */
  int ncprio;
  int pdl;                      /* @pdl: the kernel waits for its predecessor itself */
  int prefetch;                 /* @prefetch: the kernel takes an L2 window (pf, pf_n) last */
} gc_template_t;

typedef struct gc_templates {
  gc_template_t *v;
  int n;
  char *prelude[4];             /* cpu, cuda, hip (prelude_index picks); the GPU common part */
} gc_templates_t;

/* Parse src (n bytes, from path) into t. Errors name path:line and what is
 * wrong: a missing @template/@op/@kernel/@grid, a default not among the
 * values, an undeclared name in an expression, duplicate params. */
int gc_tpl_parse(const char *path, const char *src, size_t n, gc_template_t *t,
                 gc_err_t *e);
void gc_tpl_free(gc_template_t *t);

/* Load every template and prelude: from dir (files DIR/<backend>/NAME.c and
 * DIR/<backend>/prelude.h) or, when dir is NULL, the embedded copies. The
 * GPU preludes' line #include "prelude_common.h" is replaced by that
 * file's text (GC_EINVAL where it is missing). */
int gc_tpl_load_all(const char *dir, gc_templates_t *set, gc_err_t *e);
void gc_tpl_free_all(gc_templates_t *set);
const gc_template_t *gc_tpl_find(const gc_templates_t *set, const char *name);

/* One point in a template's space, for one dtype triple. */
typedef struct gc_variant {
  const gc_template_t *tpl;
  char op[GC_OP_NAME];           /* which of the template's ops */
  gc_dtype_t ta, tb, tc;
  int64_t values[GC_TPL_PARAMS]; /* in declaration order */
  char params[512];              /* canonical "MR=6,NR=32" */
} gc_variant_t;

/* Does template t generate code for a target of this backend ("cpu",
 * "cuda", "hip")? A "gpu" template serves both GPU backends. */
int gc_tpl_serves(const gc_template_t *t, const char *backend);

/* Does the template implement problem p's op and dtypes? */
int gc_tpl_supports(const gc_template_t *t, const gc_problem_t *p);
/* Fill v with the template defaults for p's op (@param's, or an
 * @defaults line's for that op) and p's dtypes; on target tg (NULL: none)
 * also the conditional @defaults lines whose condition holds there (one
 * that fails to evaluate does not hold). */
void gc_tpl_default(const gc_template_t *t, const gc_target_t *tg, const gc_problem_t *p,
                    gc_variant_t *v);
/* t's default for p if usable on tg (applies to p, satisfies the
 * constraints), else the nearest usable variant: the defaults with one
 * parameter changed, then with two, then, where the default applies, the
 * first usable point of the space. *ok = 0 when there is none. */
int gc_tpl_nearest(const gc_template_t *t, const gc_target_t *tg, const gc_problem_t *p,
                   gc_variant_t *v, int *ok, gc_err_t *e);
/* The untuned choice for p on tg: among templates of tg's backend that
 * support p and apply to it, the highest @priority (ties: first loaded);
 * its defaults on tg (the declared ones and the @defaults ... if lines
 * that hold there), or, if those break a constraint on tg, the nearest
 * usable point (gc_tpl_nearest); then, on targets with a CU count (AMD), the architecture
 * heuristic of gen/defaults.h may move it to a nearby point that fills
 * the machine. GC_ENOTFOUND / GC_EINVAL with a message when none. */
int gc_tpl_pick_default(const gc_templates_t *set, const gc_target_t *tg,
                        const gc_problem_t *p, gc_variant_t *v, gc_err_t *e);

/* t's @priority for problem p on tg, v its default variant there: the
 * first `@priority N if EXPR` line whose EXPR holds (names as in
 * @constraint), else its plain @priority. */
int gc_tpl_priority(const gc_template_t *t, const gc_target_t *tg, const gc_problem_t *p,
                    const gc_variant_t *v);

/* Rewrite v->params from v->values (after changing values by hand). */
void gc_tpl_refresh(gc_variant_t *v);
/* Set v's params from text "A=1,B=2" (names must exist, values must be
 * among the declared ones; unnamed params keep their defaults). */
int gc_tpl_set_params(const gc_template_t *t, const char *text, gc_variant_t *v,
                      gc_err_t *e);
/* Count of points in the space (product of value counts), saturating. */
int64_t gc_tpl_space_size(const gc_template_t *t);
/* The i-th point (odometer order, last param fastest) for p's dtypes. */
void gc_tpl_nth(const gc_template_t *t, const gc_problem_t *p, int64_t i,
                gc_variant_t *v);

/* Environment of v on target: target constants, SA SB SC, params, and when
 * p is given M N K. */
int gc_tpl_env(const gc_variant_t *v, const gc_target_t *tg, const gc_problem_t *p,
               gc_env_t *env, gc_err_t *e);
/* *ok = 1 when every @constraint holds; else *why names the first that
 * fails (points into the template). */
int gc_tpl_valid(const gc_variant_t *v, const gc_target_t *tg, int *ok,
                 const char **why, gc_err_t *e);
/* *ok = 1 when every @applies holds for p. */
int gc_tpl_applies(const gc_variant_t *v, const gc_target_t *tg,
                   const gc_problem_t *p, int *ok, gc_err_t *e);
/* Evaluate @grid and @block for p. */
int gc_tpl_launch(const gc_variant_t *v, const gc_target_t *tg, const gc_problem_t *p,
                  int64_t grid[3], int64_t block[3], gc_err_t *e);
/* The constants a bundle stores for evaluating grid/block at run time:
 * params, target constants and dtype sizes as "A=1,B=2". */
int gc_tpl_consts_text(const gc_variant_t *v, const gc_target_t *tg, char *out,
                       size_t n, gc_err_t *e);

/* t's @tensormap declarations as a bundle stores them: one a line, ""
 * when none. out has room for n bytes (GC_TMAPS_MAX * GC_TMAP_LINE
 * always suffices). */
void gc_tpl_tmaps_text(const gc_template_t *t, char *out, size_t n);

/* Expand v for target into source text (appended to src), and compute its
 * variant id from the template hash, params, dtypes, target and compiler. */
int gc_tpl_expand(const gc_templates_t *set, const gc_variant_t *v,
                  const gc_target_t *tg, const char *compiler_id, gc_buf_t *src,
                  char vid[GC_HASH_HEX], gc_err_t *e);
/* The variant id alone (cheap; no source). */
void gc_tpl_vid(const gc_variant_t *v, const gc_target_t *tg,
                const char *compiler_id, char vid[GC_HASH_HEX]);

#endif
