// The CUDA emulator's scheduler (tests/cuda_emu/emu.h): the threads of a block as fibers on the
// calling OS thread, the switches between their stacks, the barriers, and the launch loop.
// Switching: on x86-64 a dozen instructions (kvzip_emu_switch below); elsewhere ucontext, whose
// swapcontext also saves the signal mask with a system call each time, which made it spend most
// of the suite's time switching.
#include "emu.h"

#include <sys/mman.h>

#include <exception>
#include <memory>
#include <stdexcept>
#include <utility>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// AddressSanitizer must be told of every switch between stacks (its fiber interface), or it
// takes a fiber's stack for a corrupt one.
#if defined(__SANITIZE_ADDRESS__)
#define KVZIP_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVZIP_EMU_ASAN 1
#endif
#endif
#ifdef KVZIP_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__)
// kvzip_emu_switch(from, to): pushes the System V callee-saved registers, MXCSR and the x87
// control word (the ABI's callee-saved state) on the current stack, stores the stack pointer in
// *from, loads `to` as the stack pointer and pops the same from it. A fresh fiber's stack is laid
// out as if it had switched away just before its entry function (see start_fiber).
extern "C" void kvzip_emu_switch(void** from, void* to);
asm(R"(
  .text
  .p2align 4
  .globl kvzip_emu_switch
  .type kvzip_emu_switch, @function
kvzip_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kvzip_emu_switch, .-kvzip_emu_switch
)");
#endif

namespace emu {
namespace {

// 512 KiB a fiber (address space: pages are touched as used; kernels keep their arrays in
// registers or shared memory, so a few KiB are), a guard page below.
constexpr size_t kStackBytes = size_t(512) << 10, kGuardBytes = 4096;

struct Context {
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
};

// One CUDA thread: its context, its stack and the barrier phase it waits for.
struct Fiber {
  ThreadCtx ctx;
  Context cx;
  void* stack = nullptr;
  bool done = false;
  const Barrier* waits = nullptr;  // runnable again once waits->phase moves past wait_phase
  uint64_t wait_phase = 0;
  void* fake_stack = nullptr;  // ASan's, across a switch
};

struct Scheduler {
  Context cx;
  Fiber* running = nullptr;
  void* fake_stack = nullptr;
  const void* stack_bottom = nullptr;  // the scheduler's stack, for ASan
  size_t stack_size = 0;
  const void* body = nullptr;  // the launch's kernel call
  void (*call)(const void*) = nullptr;
  std::exception_ptr failed;
};
Scheduler sched;

// Stacks are kept for the process's life and reused by every launch.
void* fiber_stack(size_t i) {
  static std::vector<void*> pool;
  while (pool.size() <= i) {
    void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("cuda emulator: cannot map a fiber stack");
    if (mprotect(p, kGuardBytes, PROT_NONE) != 0)
      throw std::runtime_error("cuda emulator: cannot guard a fiber stack");
    pool.push_back(static_cast<char*>(p) + kGuardBytes);
  }
  return pool[i];
}

void switch_context(Context& from, Context& to) {
#if defined(__x86_64__)
  kvzip_emu_switch(&from.sp, to.sp);
#else
  swapcontext(&from.uc, &to.uc);
#endif
}

// From the running fiber back to the scheduler (`exiting`: for good, so ASan drops its frames).
void to_scheduler(bool exiting) {
  Fiber& f = *sched.running;
#ifdef KVZIP_EMU_ASAN
  __sanitizer_start_switch_fiber(exiting ? nullptr : &f.fake_stack, sched.stack_bottom,
                                 sched.stack_size);
#endif
  switch_context(f.cx, sched.cx);
#ifdef KVZIP_EMU_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &sched.stack_bottom, &sched.stack_size);
#endif
  (void)exiting;
}

void arrive_and_drop(Barrier& b) {
  --b.expected;
  if (b.arrived > 0 && b.arrived == b.expected) {
    b.arrived = 0;
    ++b.phase;
  }
}

// Every fiber starts here; it never returns (a finished fiber is not resumed).
void fiber_main() {
  Fiber& f = *sched.running;
#ifdef KVZIP_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &sched.stack_bottom, &sched.stack_size);
#endif
  try {
    sched.call(sched.body);
  } catch (...) {
    if (!sched.failed) sched.failed = std::current_exception();
  }
  arrive_and_drop(f.ctx.block->warps[f.ctx.warp].bar);
  arrive_and_drop(f.ctx.block->bar);
  f.done = true;
  to_scheduler(true);
  std::abort();  // unreachable: the scheduler never resumes a finished fiber
}

// Makes f's context start fiber_main on its own stack at the next switch to it.
void start_fiber(Fiber& f) {
#ifdef KVZIP_EMU_ASAN
  // The stack's last fiber left its frames (and their redzones) behind when it switched away.
  __asan_unpoison_memory_region(f.stack, kStackBytes);
#endif
#if defined(__x86_64__)
  // From the top: a null return address for fiber_main (it never returns; with it, fiber_main
  // starts with the stack pointer at 8 mod 16, as after a call), fiber_main's address for the
  // switch's `ret`, six zero registers, and MXCSR and the x87 control word at their defaults.
  auto** sp = reinterpret_cast<void**>(static_cast<char*>(f.stack) + kStackBytes);
  *--sp = nullptr;
  *--sp = reinterpret_cast<void*>(&fiber_main);
  for (int r = 0; r < 6; ++r) *--sp = nullptr;
  --sp;
  const uint32_t control[2] = {0x1F80u, 0x037Fu};
  std::memcpy(sp, control, sizeof control);
  f.cx.sp = sp;
#else
  getcontext(&f.cx.uc);
  f.cx.uc.uc_stack.ss_sp = f.stack;
  f.cx.uc.uc_stack.ss_size = kStackBytes;
  f.cx.uc.uc_link = nullptr;
  makecontext(&f.cx.uc, fiber_main, 0);
#endif
}

// Runs one block: every fiber from its start to its return, in sweeps that alternate between
// ascending and descending thread order.
void run_block(std::vector<Fiber>& fs, Block& block, uint3 bid) {
  const size_t n = fs.size();
  for (Fiber& f : fs) {
    f.ctx.bid = bid;
    f.ctx.block = &block;
    f.ctx.shuffles = 0;
    f.done = false;
    f.waits = nullptr;
    start_fiber(f);
  }
  size_t live = n;
  for (bool ascending = true; live > 0; ascending = !ascending) {
    bool ran = false;
    for (size_t k = 0; k < n; ++k) {
      Fiber& f = fs[ascending ? k : n - 1 - k];
      if (f.done || (f.waits && f.waits->phase == f.wait_phase)) continue;
      f.waits = nullptr;
      sched.running = &f;
      running = &f.ctx;
#ifdef KVZIP_EMU_ASAN
      __sanitizer_start_switch_fiber(&sched.fake_stack, f.stack, kStackBytes);
#endif
      switch_context(sched.cx, f.cx);
#ifdef KVZIP_EMU_ASAN
      __sanitizer_finish_switch_fiber(sched.fake_stack, nullptr, nullptr);
#endif
      sched.running = nullptr;
      running = nullptr;
      ran = true;
      if (f.done) --live;
    }
    // On a device such a block hangs; here the launch fails (its suspended fibers are dropped).
    if (!ran)
      throw std::runtime_error(
          "cuda emulator: deadlock: threads wait at a barrier that others never reach");
  }
}

}  // namespace

void arrive_and_wait(Barrier& b) {
  if (++b.arrived == b.expected) {  // the last to arrive completes the phase and goes on
    b.arrived = 0;
    ++b.phase;
    return;
  }
  sched.running->waits = &b;
  sched.running->wait_phase = b.phase;
  to_scheduler(false);
}

void run_launch(const LaunchConfig& c, const void* body, void (*call)(const void*)) {
  const uint64_t threads = uint64_t(c.block.x) * c.block.y * c.block.z;
  if (threads == 0 || threads > 1024 || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 ||
      c.grid.z == 0 || c.grid.y > 65535 || c.grid.z > 65535 || c.smem > 227 * 1024) {
    last_error = kErrorInvalidConfiguration;
    return;
  }
  const unsigned n = static_cast<unsigned>(threads);
  std::vector<Fiber> fs(n);
  for (unsigned t = 0; t < n; ++t) {
    ThreadCtx& x = fs[t].ctx;
    x.tid = uint3{t % c.block.x, t / c.block.x % c.block.y, t / (c.block.x * c.block.y)};
    x.bdim = c.block;
    x.gdim = c.grid;
    x.warp = t / 32;
    x.lane = t % 32;
    fs[t].stack = fiber_stack(t);
  }
  sched.body = body;
  sched.call = call;
  sched.failed = nullptr;
  for (unsigned bz = 0; bz < c.grid.z; ++bz)
    for (unsigned by = 0; by < c.grid.y; ++by)
      for (unsigned bx = 0; bx < c.grid.x; ++bx) {
        Block block(n, c.smem);
        run_block(fs, block, uint3{bx, by, bz});
        if (sched.failed) std::rethrow_exception(std::exchange(sched.failed, nullptr));
      }
}

}  // namespace emu
