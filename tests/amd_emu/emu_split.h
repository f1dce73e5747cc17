/* emu_split.h — the device primitives of the decode attentions' split
 * workspaces (the GPU preludes' gc-split block) on the host, for both
 * emulations (tests/amd_emu/prelude_emu.h, tests/nv_emu/prelude_emu.h): a
 * module-scope device array is one host array (the blocks run one after
 * another); the device-scope fence and the ticket's atomic are the host's;
 * L2-only loads and stores are plain ones. Needs GC_DEVICE. */
#define GC_GLOBAL static
GC_DEVICE void gc_fence_device(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
GC_DEVICE unsigned gc_atomic_add(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
GC_DEVICE float gc_ld_cg(const float *p) { return *p; }
GC_DEVICE void gc_st_cg(float *p, float v) { *p = v; }
