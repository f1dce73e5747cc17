/* emu_fiber.h — a block's threads as fibers, for both emulations
 * (tests/amd_emu/prelude_emu.h, tests/nv_emu/prelude_emu.h): the BLOCK
 * threads of one block take turns on one host thread, each
 * running until it waits (a barrier, a wave's rendezvous, an mbarrier
 * phase), so a barrier costs a few switches rather than a wake-up of
 * hundreds of host threads by the kernel. Nothing the emulated kernel
 * computes depends on the order the threads take turns: every exchange
 * between them goes through a wait here.
 *
 * A switch saves the callee-saved registers and the stack pointer and
 * loads the other fiber's (emu_switch, x86-64): glibc's swapcontext would
 * add a system call a switch (the signal mask), and ASan's interceptor of
 * it clears the shadow of the whole stack each time.
 *
 * A wait that no thread can complete (every thread of the block waiting,
 * none having moved since the last round) would hang the GPU: the
 * emulation says so and ends the run with exit status 3, at once.
 *
 * ASan is told about every switch of stacks (the sanitizer's fiber
 * interface), so it checks the fibers' stacks as it checks threads'. */
#ifndef EMU_FIBER_H
#define EMU_FIBER_H
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#if !defined(__x86_64__)
#error "emu_fiber.h: the fiber switch is written for x86-64"
#endif
/* Save the callee-saved registers on the running stack, store its
 * pointer to *save, and continue on the stack at sp (one emu_switch
 * stored, or emu_fiber_stack's). */
extern "C" void emu_switch(void **save, void *sp);
asm(".text\n.globl emu_switch\n.type emu_switch,@function\nemu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
    ".size emu_switch, .-emu_switch\n");

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifndef EMU_ASAN
#define EMU_ASAN 0
#endif
#if EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#define EMU_STACK (1u << 20) /* bytes of stack a thread (ASan's frames are wide) */

struct emu_fiber {
  void *sp; /* its saved stack pointer, while it does not run */
  void *stack;
  bool done;
  const char *waits; /* what it waits for, while it does */
};
/* the running block's fibers, the scheduler's context and stack */
static emu_fiber *emu_fibers;
static int emu_nfibers;
static int emu_cur; /* the running fiber: the emulated thread's index in its block */
static void *emu_sched_sp;
static const void *emu_sched_bottom;
static size_t emu_sched_size;
static unsigned long emu_moves; /* waits entered or completed, threads ended */
static void (*emu_body)(void *);
static void *emu_body_arg;

/* From the running fiber back to the scheduler (done: the fiber ended and
 * never resumes). */
static void emu_to_sched(bool done) {
#if EMU_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(done ? nullptr : &fake, emu_sched_bottom, emu_sched_size);
  emu_switch(&emu_fibers[emu_cur].sp, emu_sched_sp);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void)done;
  emu_switch(&emu_fibers[emu_cur].sp, emu_sched_sp);
#endif
}

/* A fiber's first code (emu_switch returns into it), never returning. */
static void emu_fiber_main(void) {
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &emu_sched_bottom, &emu_sched_size);
#endif
  emu_body(emu_body_arg);
  emu_fibers[emu_cur].done = true;
  emu_moves++;
  emu_to_sched(true);
}

/* Let the block's other threads run; the caller resumes after them. */
static void emu_yield(void) { emu_to_sched(false); }

/* Wait until pred() holds (what: the wait's name, for the hang message). */
template <class P> static void emu_wait_until(P pred, const char *what) {
  emu_moves++;
  emu_fibers[emu_cur].waits = what;
  while (!pred())
    emu_yield();
  emu_fibers[emu_cur].waits = nullptr;
  emu_moves++;
}

/* The fibers' stacks, kept from block to block of the run: mapping and
 * unmapping n stacks a block (and ASan's release of their shadow) cost
 * more system time than the emulated blocks themselves. */
static void **emu_stacks;
static int emu_nstacks;

/* Stack t of the pool, mapped the first time it is needed; a reused one
 * is unpoisoned first (ASan: the frames a fiber that ended left marked). */
static void *emu_stack(int t) {
  if (t >= emu_nstacks) {
    emu_stacks = (void **)realloc(emu_stacks, (t + 1) * sizeof *emu_stacks);
    for (; emu_nstacks <= t; emu_nstacks++) {
      emu_stacks[emu_nstacks] =
          mmap(nullptr, EMU_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (emu_stacks[emu_nstacks] == MAP_FAILED) {
        perror("emulation: mmap");
        exit(2);
      }
    }
    return emu_stacks[t];
  }
#if EMU_ASAN
  __asan_unpoison_memory_region(emu_stacks[t], EMU_STACK);
#endif
  return emu_stacks[t];
}

/* Run body(arg) as n threads of one block, in turns, to the end. */
static void emu_fibers_run(int n, void (*body)(void *), void *arg) {
  emu_fibers = new emu_fiber[n];
  emu_nfibers = n, emu_body = body, emu_body_arg = arg;
  for (int t = 0; t < n; t++) {
    emu_fiber &f = emu_fibers[t];
    f.done = false, f.waits = nullptr;
    f.stack = emu_stack(t);
    /* the stack as emu_switch leaves one: six registers (zero), then the
     * address it returns to, then a null return address for
     * emu_fiber_main, which it finds as if called (16-byte aligned + 8) */
    void **top = (void **)((char *)f.stack + EMU_STACK);
    top[-1] = nullptr;
    top[-2] = (void *)emu_fiber_main;
    for (int r = 3; r <= 8; r++) top[-r] = nullptr;
    f.sp = top - 8;
  }
  for (int live = n; live > 0;) {
    const unsigned long before = emu_moves;
    live = 0;
    for (int t = 0; t < n; t++) {
      if (emu_fibers[t].done) continue;
      emu_cur = t;
#if EMU_ASAN
      void *fake = nullptr;
      __sanitizer_start_switch_fiber(&fake, emu_fibers[t].stack, EMU_STACK);
      emu_switch(&emu_sched_sp, emu_fibers[t].sp);
      __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
      emu_switch(&emu_sched_sp, emu_fibers[t].sp);
#endif
      live += !emu_fibers[t].done;
    }
    if (live && emu_moves == before) { /* a round in which nobody moved: all wait */
      const char *what = "a wait";
      for (int t = 0; t < n; t++)
        if (!emu_fibers[t].done && emu_fibers[t].waits) what = emu_fibers[t].waits;
      fprintf(stderr, "emulation: %s never completed (a hang on the GPU)\n", what);
      fflush(stdout);
      _exit(3);
    }
  }
  delete[] emu_fibers;
  emu_fibers = nullptr;
}

/* A rendezvous of the threads that call it, n of them each time (a block
 * barrier, a wave's, bar.sync id n, __syncwarp): generation counting. */
struct emu_fbar {
  int count = 0, gen = 0;
};
static void emu_fbar_wait(emu_fbar *b, int n, const char *what = "a barrier") {
  const int g = b->gen;
  if (++b->count == n) {
    b->count = 0, b->gen++;
    emu_moves++;
    return;
  }
  emu_wait_until([&] { return b->gen != g; }, what);
}
/* bar.arrive: counts toward the barrier's n without waiting. */
static void emu_fbar_arrive(emu_fbar *b, int n) {
  if (++b->count == n)
    b->count = 0, b->gen++;
  emu_moves++;
}
#endif
