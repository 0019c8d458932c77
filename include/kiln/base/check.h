// KILN_CHECK: assertions for programmer errors (broken invariants), always on, in every build.
//
//   KILN_CHECK(offset + bytes <= capacity) << "segment " << index << " overruns its buffer";
//   KILN_CHECK_EQ(received_bytes, expected_bytes);
//
// A failed check prints "file:line: check failed: <condition> <values> <message>" to stderr and
// aborts, so a core dump or a sanitizer report points at the exact place. Operating errors (I/O,
// peers, user input) are never checked this way; they are returned as Status.
//
// The condition must have no side effects: it is evaluated exactly once, but readers should not
// have to care.
#ifndef KILN_BASE_CHECK_H_
#define KILN_BASE_CHECK_H_

#include <optional>
#include <sstream>
#include <string>

namespace kiln::internal {

// Collects the message of a failed check; its destructor prints it and aborts.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;

  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `KILN_CHECK(c) << ...` be an expression of type void in both branches of `?:`.
struct CheckVoidify {
  void operator&(std::ostream&) {}
};

// Evaluates `op(a, b)` once; returns nothing when it holds, else the operands as text.
template <typename A, typename B, typename Op>
std::optional<std::string> check_op(const A& a, const B& b, Op op) {
  if (op(a, b)) return std::nullopt;
  std::ostringstream out;
  out << "(" << a << " vs " << b << ") ";
  return out.str();
}

}  // namespace kiln::internal

#define KILN_CHECK(condition)                      \
  (condition) ? (void)0                            \
              : ::kiln::internal::CheckVoidify() & \
                    ::kiln::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

// Each operand is evaluated exactly once. The loop body runs at most once: CheckFailure's
// destructor does not return.
#define KILN_CHECK_OP_(a, b, op)                                                                   \
  while (auto kiln_check_operands_ = ::kiln::internal::check_op(                                   \
             (a), (b),                                                                             \
             [](const auto& kiln_lhs_, const auto& kiln_rhs_) { return kiln_lhs_ op kiln_rhs_; })) \
  ::kiln::internal::CheckFailure(__FILE__, __LINE__, #a " " #op " " #b).stream()                   \
      << *kiln_check_operands_

#define KILN_CHECK_EQ(a, b) KILN_CHECK_OP_(a, b, ==)
#define KILN_CHECK_NE(a, b) KILN_CHECK_OP_(a, b, !=)
#define KILN_CHECK_LT(a, b) KILN_CHECK_OP_(a, b, <)
#define KILN_CHECK_LE(a, b) KILN_CHECK_OP_(a, b, <=)
#define KILN_CHECK_GT(a, b) KILN_CHECK_OP_(a, b, >)
#define KILN_CHECK_GE(a, b) KILN_CHECK_OP_(a, b, >=)

#endif  // KILN_BASE_CHECK_H_
