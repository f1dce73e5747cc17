/* gcore.h — gcore as a library: the tuned kernels of a bundle or a tuning
 * database, run on the caller's buffers and the caller's stream.
 *
 * A context (gcore_ctx) is one device and where its kernels come from: a
 * bundle file (gcore-gen's output), or a tuning database and a target, from
 * which bundles are built on demand (gcore-tune's winners; the template's
 * documented default where nothing was tuned) into the compile cache
 * ($GCORE_CACHE, else $XDG_CACHE_HOME/gcore, else ~/.cache/gcore). A shape
 * that the bundle lacks gets a default kernel built on demand. Every
 * default kernel is verified on this device against gcore's fp64
 * reference before its first use (on random inputs of the call's shape
 * with at most 64 rows, fewer where the host's reference would cost over
 * a few GFLOP), and a kernel that fails is never used: the next source
 * serves the call, or it returns GCORE_EVERIFY, never a wrong result. gcore_stats counts
 * the calls that ran tuned and untuned kernels.
 *
 * Buffers are the caller's: device pointers (cuda, hip) or host pointers
 * (cpu), dense and row-major, each at least 64-byte aligned (what
 * cudaMalloc, hipMalloc, torch and posix_memalign(64) give). Nothing is
 * copied. On a GPU a call only enqueues its kernel on `stream` (a
 * CUstream/cudaStream_t or hipStream_t of the device's primary context,
 * the context the CUDA/HIP runtime and PyTorch use; NULL is the default
 * stream) and returns; the caller synchronises as usual. On the CPU the
 * context's thread pool runs the kernel before the call returns, and
 * `stream` must be NULL. The first call of a shape may build and verify
 * a kernel (seconds, once; the result is cached on disk): run it once
 * before capturing a CUDA graph.
 *
 * Thread safety: a context may be used from any number of threads at
 * once; calls on one context are serialised inside (a GPU call holds the
 * lock only while it enqueues). Errors: every function that can fail
 * returns a GCORE_* code (GCORE_OK = 0) and leaves a one-line message for
 * the calling thread (gcore_errmsg). Nothing aborts or exits.
 *
 * ABI: handles are opaque, enums have fixed values, no struct crosses the
 * boundary, and only gcore_* symbols are exported. The soname's number is
 * GCORE_ABI_VERSION; it changes only when binaries built against an earlier
 * gcore.h would break. */
#ifndef GCORE_H
#define GCORE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define GCORE_API __attribute__((visibility("default")))
#else
#define GCORE_API
#endif

/* ---- version ------------------------------------------------------------ */

#define GCORE_VERSION "0.1.0"
#define GCORE_VERSION_NUMBER 1000 /* major * 1000000 + minor * 1000 + patch */
#define GCORE_ABI_VERSION 1

/* The library's version, which may differ from the header's (GCORE_VERSION)
 * when a newer library is loaded. Can't fail. */
GCORE_API const char *gcore_version(void);
GCORE_API int gcore_version_number(void);
GCORE_API int gcore_abi_version(void);

/* ---- errors --------------------------------------------------------------- */

enum {
  GCORE_OK = 0,
  GCORE_EINVAL = 1,       /* a bad argument: NULL, a dimension out of range, a misaligned pointer */
  GCORE_ENOMEM = 2,       /* host or device memory ran out */
  GCORE_EIO = 3,          /* a file could not be read or written */
  GCORE_ECORRUPT = 4,     /* a bundle or database is malformed */
  GCORE_ENOTFOUND = 5,    /* a file, backend entry or kernel does not exist */
  GCORE_EUNSUPPORTED = 6, /* no kernel serves this shape or dtype on this device */
  GCORE_EDEVICE = 7,      /* no such device, or a driver error */
  GCORE_ECOMPILE = 8,     /* building a kernel failed (no NVRTC, no compiler) */
  GCORE_ELAUNCH = 9,      /* the kernel launch failed */
  GCORE_EVERIFY = 10      /* the only kernel for the shape disagreed with the reference */
};

/* The message of the calling thread's last gcore call ("" after a call
 * that succeeded). Valid until that thread's next call. Can't fail. */
GCORE_API const char *gcore_errmsg(void);
/* "GCORE_EINVAL", ... for a code; "GCORE_E?" for any other value. */
GCORE_API const char *gcore_errname(int code);

/* ---- contexts ------------------------------------------------------------- */

typedef struct gcore_ctx gcore_ctx;

/* Open device `device` of backend "cpu", "cuda" or "hip" with the kernels
 * of the bundle at bundle_path (which must have code for this device).
 * Shapes the bundle lacks get template defaults, built on demand and
 * verified. On failure *ctx is NULL. */
GCORE_API int gcore_open(const char *backend, int device, const char *bundle_path,
                         gcore_ctx **ctx);

/* Open device `device` of backend with kernels built on demand from the
 * tuning database at db_path: per shape, gcore-tune's winner where the
 * database has one for target, else the template default (verified).
 * db_path NULL: the default database ($GCORE_DB, else
 * $XDG_DATA_HOME/gcore/tune.db, else ~/.local/share/gcore/tune.db); a
 * database that does not exist gives defaults only. target NULL: the
 * device's own (arch-specific where there is one: sm_90a on an H100). */
GCORE_API int gcore_open_db(const char *backend, int device, const char *db_path,
                            const char *target, gcore_ctx **ctx);

/* Free the context; no call on it may be running in another thread. Work
 * it enqueued on a caller's stream must have finished (synchronise the
 * stream first). NULL is a no-op. */
GCORE_API void gcore_close(gcore_ctx *ctx);

/* The target the context's kernels are built for ("sm_90a",
 * "cpu:x86-64-v4"); "" for NULL. Valid while ctx is open. */
GCORE_API const char *gcore_target(const gcore_ctx *ctx);

/* ---- operations ----------------------------------------------------------- *
 * Dimensions are in [1, 2^31). The dtypes name each operand: ta the
 * activations (A, Q), tb the weights (B, W, norm, the KV caches), tc the
 * output. Each template supports its own dtype combinations (all three
 * the same always works); others are GCORE_EUNSUPPORTED. Accumulation is
 * fp32 or better. */

enum { GCORE_F32 = 0, GCORE_F16 = 1, GCORE_BF16 = 2 };

enum {
  GCORE_EPI_NONE = 0,   /* C = A·Bᵀ,                      B is [n,k] */
  GCORE_EPI_ADD = 1,    /* C += A·Bᵀ (C is read: a residual added in place) */
  GCORE_EPI_SWIGLU = 2  /* C = silu(A·Gᵀ) ⊙ (A·Uᵀ),       B is [2n,k]: G = rows 0..n-1, U = rows n..2n-1 */
};

/* C[m,n] from A[m,k] and B[n,k] (B[2n,k] for SWIGLU) as epilogue says:
 * B is laid out as torch.nn.Linear's weight, so C = A·Bᵀ is a Linear layer
 * without bias. */
GCORE_API int gcore_gemm(gcore_ctx *ctx, int epilogue, int ta, int tb, int tc, int64_t m,
                         int64_t n, int64_t k, const void *a, const void *b, void *c,
                         void *stream);

/* The same of rmsnorm(A) = A / sqrt(mean(A²) + eps) ⊙ norm[k] (norm of
 * dtype tb), computed in the GEMM's pass over A; epilogue NONE or SWIGLU. */
GCORE_API int gcore_rmsnorm_gemm(gcore_ctx *ctx, int epilogue, int ta, int tb, int tc,
                                 int64_t m, int64_t n, int64_t k, const void *a,
                                 const void *norm, float eps, const void *b, void *c,
                                 void *stream);

/* Y[m,n] = X / sqrt(mean(X²) + eps) ⊙ W[n], row by row. */
GCORE_API int gcore_rmsnorm(gcore_ctx *ctx, int ta, int tb, int tc, int64_t m, int64_t n,
                            const void *x, const void *w, float eps, void *y, void *stream);

/* Causal attention with grouped KV heads: O[m, h·d] from Q[m, h·d] and the
 * caches Kc, Vc [S, g·d] (S >= pos0 + m rows), where pos0 = pos[0] is an
 * int32 the kernel reads from memory (device memory on a GPU, so that a
 * captured graph replays at any position). Query row i sits at position
 * pos0 + i and attends to cache rows 0 .. pos0 + i of kv head
 * j / (h / g) for its head j; O = softmax(scale · q·kᵀ) · v, usually
 * scale = 1/sqrt(d). h must be a multiple of g. */
GCORE_API int gcore_attention(gcore_ctx *ctx, int ta, int tb, int tc, int64_t m, int64_t h,
                              int64_t g, int64_t d, const void *q, const void *kc,
                              const void *vc, const int32_t *pos, float scale, void *o,
                              void *stream);

/* ---- statistics ----------------------------------------------------------- */

enum {
  GCORE_STAT_CALLS = 0,         /* operations that launched a kernel */
  GCORE_STAT_TUNED = 1,         /* of those, with a tuned kernel (a winner of gcore-tune) */
  GCORE_STAT_UNTUNED = 2,       /* of those, with a verified default kernel */
  GCORE_STAT_ERRORS = 3,        /* operations that returned an error */
  GCORE_STAT_BUILDS = 4,        /* bundles built or taken from the cache on demand */
  GCORE_STAT_VERIFIED = 5,      /* default kernels verified against the reference */
  GCORE_STAT_VERIFY_FAILED = 6, /* of those, kernels that failed and are never used */
  GCORE_STAT_COUNT = 7
};

/* Copy the first n counters (indices GCORE_STAT_*) since the context was
 * opened into values; returns how many were written (n is capped at
 * GCORE_STAT_COUNT of this library), or -1 for a NULL argument. */
GCORE_API int gcore_stats(const gcore_ctx *ctx, int64_t *values, int n);

#ifdef __cplusplus
}
#endif

#endif
