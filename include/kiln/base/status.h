// Status: the outcome of an operation that can fail for operating reasons (I/O, a lost peer,
// bad user input, a timeout). Programmer errors are not Statuses; they hit KILN_CHECK.
//
// A Status is either OK or carries one of a few stable codes plus a message that says what
// happened and where ("allreduce seq=7: recv from rank 3 timed out after 30000 ms"). Callers add
// context on the way up with with_context(), so the final message reads outermost-first.
//
// Libraries never throw across their boundaries (docs/errors.md); they return Status or
// Result<T>. Both are [[nodiscard]]: dropping one is a compile error under -Werror.
#ifndef KILN_BASE_STATUS_H_
#define KILN_BASE_STATUS_H_

#include <string>
#include <string_view>
#include <utility>

namespace kiln {

// The codes are few and stable: tools and tests match on them, so never renumber.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // the caller's input is wrong (a config key, a flag, a frame)
  kNotFound = 2,         // a file, key or job that should exist does not
  kIoError = 3,          // the OS refused: open, write, fsync, connect, a full disk
  kTimeout = 4,          // a deadline passed before the operation finished
  kAborted = 5,          // the operation was cancelled (communicator aborted, queue closed)
  kCorruption = 6,       // data failed a checksum or a format check
  kNotSupported = 7,     // a valid request this build or machine cannot serve
  kUnavailable = 8,      // a peer or service is gone or not ready; retrying later may work
};

// Returns the code's stable name, e.g. "Timeout".
std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  // An OK status. Cheap: no allocation.
  Status() = default;

  static Status invalid_argument(std::string msg) {
    return Status(StatusCode::kInvalidArgument, std::move(msg));
  }
  static Status not_found(std::string msg) { return Status(StatusCode::kNotFound, std::move(msg)); }
  static Status io_error(std::string msg) { return Status(StatusCode::kIoError, std::move(msg)); }
  static Status timeout(std::string msg) { return Status(StatusCode::kTimeout, std::move(msg)); }
  static Status aborted(std::string msg) { return Status(StatusCode::kAborted, std::move(msg)); }
  static Status corruption(std::string msg) {
    return Status(StatusCode::kCorruption, std::move(msg));
  }
  static Status not_supported(std::string msg) {
    return Status(StatusCode::kNotSupported, std::move(msg));
  }
  static Status unavailable(std::string msg) {
    return Status(StatusCode::kUnavailable, std::move(msg));
  }

  // REQUIRES: code != kOk (an OK status carries no message; use Status()).
  Status(StatusCode code, std::string msg);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  bool is_invalid_argument() const { return code_ == StatusCode::kInvalidArgument; }
  bool is_not_found() const { return code_ == StatusCode::kNotFound; }
  bool is_io_error() const { return code_ == StatusCode::kIoError; }
  bool is_timeout() const { return code_ == StatusCode::kTimeout; }
  bool is_aborted() const { return code_ == StatusCode::kAborted; }
  bool is_corruption() const { return code_ == StatusCode::kCorruption; }
  bool is_not_supported() const { return code_ == StatusCode::kNotSupported; }
  bool is_unavailable() const { return code_ == StatusCode::kUnavailable; }

  // Returns a status with the same code and "context: message". An OK status stays OK.
  Status with_context(std::string_view context) const;

  // "OK", or "<CodeName>: <message>".
  std::string to_string() const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace kiln

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define KILN_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::kiln::Status kiln_status_ = (expr);        \
    if (!kiln_status_.ok()) return kiln_status_; \
  } while (false)

#endif  // KILN_BASE_STATUS_H_
