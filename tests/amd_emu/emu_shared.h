/* emu_shared.h — a kernel's static shared arrays (GC_SHARED) on the host
 * SIMT emulation: function statics in section emu_shared, one copy for the
 * program since blocks run one after another; run_block.h fills the
 * section with EMU_LDS_FILL at each block's start, as it fills the dynamic
 * LDS, so that a block reads neither the zeros of program start nor what
 * the block before left there. Included by a prelude that gives templates
 * GC_SHARED, and by run_block.h. */
#ifndef GC_EMU_SHARED_H
#define GC_EMU_SHARED_H
#define GC_SHARED static __attribute__((section("emu_shared")))
extern "C" unsigned char __start_emu_shared[], __stop_emu_shared[];
/* so that the section exists where a kernel declares no GC_SHARED array */
static unsigned char emu_shared_anchor[16] __attribute__((section("emu_shared"), used));
#endif
