// FunctionRef<R(Args...)>: a non-owning reference to a callable, for parameters that are called
// during the call and never stored (like absl::FunctionRef or C++26 std::function_ref). Unlike
// std::function it never allocates, which matters on hot paths: a lambda with three reference
// captures does not fit std::function's small buffer.
//
// REQUIRES: the referenced callable outlives every call through the FunctionRef.
#ifndef KILN_BASE_FUNCTION_REF_H_
#define KILN_BASE_FUNCTION_REF_H_

#include <memory>
#include <type_traits>
#include <utility>

namespace kiln {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                                    std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& f)  // NOLINT: implicit, like a function pointer
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace kiln

#endif  // KILN_BASE_FUNCTION_REF_H_
