// The write-everything loop of the POSIX WritableFile, apart from the fd so that tests can drive
// it with a write() that returns 0 or fails with EINTR. Private to kiln_base.
#ifndef KILN_BASE_WRITE_LOOP_H_
#define KILN_BASE_WRITE_LOOP_H_

#include <sys/types.h>

#include <cstddef>
#include <string>

#include <kiln/base/function_ref.h>
#include <kiln/base/status.h>

namespace kiln::base_internal {

// A write(2)-like call: bytes taken, or -1 with errno set.
using WriteCall = FunctionRef<ssize_t(const void* data, size_t size)>;

// Calls `write_call` until all of [data, data + size) is taken. Retries EINTR and short writes;
// a call that takes 0 bytes of a non-zero count fails as ENOSPC (a device that takes nothing is
// full, and retrying would spin forever). Errors are "<path>: write: <strerror>".
Status write_fully(WriteCall write_call, const std::string& path, const void* data, size_t size);

}  // namespace kiln::base_internal

#endif  // KILN_BASE_WRITE_LOOP_H_
