// FunctionRef<R(Args...)>: a reference to a callable, for parameters that are
// called before the function returns and never kept (ThreadPool::ParallelFor,
// exec::ParallelRanges). Unlike std::function it never copies the callable,
// so a lambda with any captures costs no allocation. The callable must
// outlive the FunctionRef: bind it to a parameter, not to a variable that
// outlives a temporary lambda. A plain function is passed by its address
// (&F), a pointer that lives as long as the call's full expression.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace weft {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
           std::is_invocable_r_v<R, F&, Args...>)
      FunctionRef(F&& f)  // NOLINT(google-explicit-constructor): binds like std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace weft
