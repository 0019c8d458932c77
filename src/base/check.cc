// The failure path of KILN_CHECK: print where and why, then abort.
#include <kiln/base/check.h>

#include <cstdio>
#include <cstdlib>

namespace kiln::internal {

CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  stream_ << file << ":" << line << ": check failed: " << condition << " ";
}

CheckFailure::~CheckFailure() {
  const std::string text = stream_.str();
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace kiln::internal
