// Result<T>: a value of type T, or the non-OK Status that explains why there is none.
//
// C++20 has no std::expected, so this is the small subset Kiln needs. Invariant: a Result holds
// either a T or a Status whose ok() is false, never an OK Status without a value (constructing
// one is a programmer error and hits KILN_CHECK).
#ifndef KILN_BASE_RESULT_H_
#define KILN_BASE_RESULT_H_

#include <type_traits>
#include <utility>
#include <variant>

#include <kiln/base/check.h>
#include <kiln/base/status.h>

namespace kiln {

template <typename T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::remove_cv_t<T>, Status>, "use Status directly");

 public:
  // Implicit on purpose: `return value;` and `return Status::not_found(...);` both read well.
  Result(T value) : state_(std::in_place_index<1>, std::move(value)) {}        // NOLINT
  Result(Status status) : state_(std::in_place_index<0>, std::move(status)) {  // NOLINT
    KILN_CHECK(!std::get<0>(state_).ok()) << "Result constructed from an OK Status";
  }

  bool ok() const { return state_.index() == 1; }

  // The error; an OK Status when a value is present.
  Status status() const { return ok() ? Status() : std::get<0>(state_); }

  // REQUIRES: ok().
  T& value() & { return checked(); }
  const T& value() const& { return checked(); }
  T&& value() && { return std::move(checked()); }
  T& operator*() & { return checked(); }
  const T& operator*() const& { return checked(); }
  T* operator->() { return &checked(); }
  const T* operator->() const { return &checked(); }

  // The value, or `fallback` when there is none.
  T value_or(T fallback) const& { return ok() ? std::get<1>(state_) : std::move(fallback); }

 private:
  T& checked() {
    KILN_CHECK(ok()) << "Result has no value: " << std::get<0>(state_).to_string();
    return std::get<1>(state_);
  }
  const T& checked() const {
    KILN_CHECK(ok()) << "Result has no value: " << std::get<0>(state_).to_string();
    return std::get<1>(state_);
  }

  std::variant<Status, T> state_;
};

}  // namespace kiln

#define KILN_CONCAT_INNER_(a, b) a##b
#define KILN_CONCAT_(a, b) KILN_CONCAT_INNER_(a, b)

// KILN_ASSIGN_OR_RETURN(auto x, FunctionReturningResult());
// Declares/assigns the value, or returns the error (as a Status or a Result<U>) from the enclosing
// function.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL_(KILN_CONCAT_(kiln_result_, __LINE__), lhs, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

#endif  // KILN_BASE_RESULT_H_
