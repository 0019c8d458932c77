// Status: names of the codes and context chaining. See include/kiln/base/status.h.
#include <kiln/base/check.h>
#include <kiln/base/status.h>

namespace kiln {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kIoError: return "IoError";
    case StatusCode::kTimeout: return "Timeout";
    case StatusCode::kAborted: return "Aborted";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kNotSupported: return "NotSupported";
    case StatusCode::kUnavailable: return "Unavailable";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {
  KILN_CHECK(code != StatusCode::kOk) << "an OK Status carries no message: " << message_;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string msg;
  msg.reserve(context.size() + 2 + message_.size());
  msg.append(context).append(": ").append(message_);
  return Status(code_, std::move(msg));
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  std::string out(status_code_name(code_));
  out.append(": ").append(message_);
  return out;
}

}  // namespace kiln
