// A fiber: a function with a stack of its own that runs on the thread that
// resumes it, until it yields or returns. LocalCluster runs more devices than
// cores as fibers on one thread per core, each yielding its core only where
// it waits for the others (runtime/comm_threads.cc): the kernel never
// switches between devices, and a waiting core can spin.
//
// A fiber may be resumed by another thread than the one it yielded on
// (LocalCluster moves a device to a thread whose devices all wait): code
// that yields must not keep thread-local state, or a thread-local's address
// computed before the yield, across it, and reads it after a yield through
// a call the compiler cannot inline or treat as `const` (libgomp's and
// weft's thread-local state belong to the thread; pthread_self is declared
// `const`). It must not yield while it holds a lock
// another fiber may take. An exception must not leave the function:
// catch everything inside it.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

namespace weft {

class Fiber {
 public:
  // A stack for fibers: `bytes` of address space (committed as touched)
  // under a guard page. A finished fiber's stack can run the next one.
  class Stack {
   public:
    explicit Stack(size_t bytes = size_t{8} << 20);
    ~Stack();
    Stack(const Stack&) = delete;
    Stack& operator=(const Stack&) = delete;
    void* base() const { return base_; }  // lowest usable address
    size_t size() const { return size_; }

   private:
    void* mapping_;
    size_t mapping_bytes_;
    void* base_;
    size_t size_;
  };

  // `fn` runs on `stack` (which must outlive the fiber) at the first Resume.
  Fiber(Stack& stack, std::function<void()> fn);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Runs the fiber until it yields or returns. Not from inside a fiber, and
  // not after it returned.
  void Resume();
  bool finished() const;

  // From inside a fiber: back to the Resume that ran it. Returns when the
  // fiber is resumed again.
  static void Yield();

  struct Impl;  // fiber.cc

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft
