#include "weft/base/fiber.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "weft/base/error.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define WEFT_FIBER_ASAN 1
#endif

namespace weft {

struct Fiber::Impl {
  std::function<void()> fn;
  Fiber::Stack* stack = nullptr;
  ucontext_t context{};  // the fiber's, while it is not running
  ucontext_t caller{};   // Resume's, while the fiber runs
  bool started = false;
  bool finished = false;
#ifdef WEFT_FIBER_ASAN
  // AddressSanitizer is told of every switch between stacks, so that it
  // neither reports the other stack's frames nor loses its fake frames.
  void* fake_stack = nullptr;
  const void* caller_bottom = nullptr;
  size_t caller_size = 0;
#endif
};

namespace {

thread_local Fiber::Impl* t_current = nullptr;  // the fiber running on this thread

// Called by the fiber, just after a switch into it.
void EnteredFiber([[maybe_unused]] Fiber::Impl& f) {
#ifdef WEFT_FIBER_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &f.caller_bottom, &f.caller_size);
#endif
}

// Called by the fiber, just before it switches back to its caller; `last`
// when it never runs again.
void LeavingFiber([[maybe_unused]] Fiber::Impl& f, [[maybe_unused]] bool last) {
#ifdef WEFT_FIBER_ASAN
  __sanitizer_start_switch_fiber(last ? nullptr : &f.fake_stack, f.caller_bottom, f.caller_size);
#endif
}

void Trampoline() {
  Fiber::Impl& f = *t_current;
  EnteredFiber(f);
  // The function catches its own exceptions (fiber.h): one escaping here
  // would find no frame to unwind to.
  f.fn();
  f.fn = nullptr;
  f.finished = true;
  LeavingFiber(f, /*last=*/true);
  setcontext(&f.caller);
  FailInternal("Fiber: setcontext back to the caller returned: {}", std::strerror(errno));
}

}  // namespace

Fiber::Stack::Stack(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_ = (bytes + page - 1) / page * page;
  mapping_bytes_ = size_ + page;
  mapping_ = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (mapping_ == MAP_FAILED) {
    Fail(
        "could not reserve {} bytes for a fiber's stack: {}; end other processes or use fewer "
        "devices per thread",
        mapping_bytes_, std::strerror(errno));
  }
  // The stack grows down, into the guard page below it: an overflow faults.
  if (mprotect(mapping_, page, PROT_NONE) != 0) {
    const int error = errno;
    munmap(mapping_, mapping_bytes_);
    FailInternal("Fiber: mprotect of a stack's guard page failed: {}", std::strerror(error));
  }
  base_ = static_cast<char*>(mapping_) + page;
}

Fiber::Stack::~Stack() { munmap(mapping_, mapping_bytes_); }

Fiber::Fiber(Stack& stack, std::function<void()> fn) : impl_(std::make_unique<Impl>()) {
  impl_->fn = std::move(fn);
  impl_->stack = &stack;
  if (getcontext(&impl_->context) != 0)
    FailInternal("Fiber: getcontext failed: {}", std::strerror(errno));
  impl_->context.uc_stack.ss_sp = stack.base();
  impl_->context.uc_stack.ss_size = stack.size();
#ifdef WEFT_FIBER_ASAN
  // A stack reused from an earlier fiber (LocalCluster keeps them across
  // runs), or mapped where an unmapped one was, still carries that fiber's
  // poisoned redzones: frames it left by a switch never returned. A fresh
  // fiber's frames start clean.
  __asan_unpoison_memory_region(stack.base(), stack.size());
#endif
  impl_->context.uc_link = nullptr;  // Trampoline switches back itself
  makecontext(&impl_->context, &Trampoline, 0);
}

Fiber::~Fiber() = default;

bool Fiber::finished() const { return impl_->finished; }

void Fiber::Resume() {
  Impl& f = *impl_;
  WEFT_INTERNAL_CHECK(t_current == nullptr, "Fiber::Resume from inside a fiber");
  WEFT_INTERNAL_CHECK(!f.finished, "Fiber::Resume of a fiber that returned");
  t_current = &f;
#ifdef WEFT_FIBER_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, f.stack->base(), f.stack->size());
#endif
  const int rc = swapcontext(&f.caller, &f.context);
#ifdef WEFT_FIBER_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  t_current = nullptr;
  if (rc != 0) FailInternal("Fiber: swapcontext into a fiber failed: {}", std::strerror(errno));
}

void Fiber::Yield() {
  Impl* f = t_current;
  WEFT_INTERNAL_CHECK(f != nullptr, "Fiber::Yield outside a fiber");
  LeavingFiber(*f, /*last=*/false);
  const int rc = swapcontext(&f->context, &f->caller);
  EnteredFiber(*f);
  if (rc != 0) FailInternal("Fiber: swapcontext out of a fiber failed: {}", std::strerror(errno));
}

}  // namespace weft
