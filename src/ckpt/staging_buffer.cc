// Page-aligned, pinned-where-allowed host memory for checkpoint staging. See staging_buffer.h.
#include "ckpt/staging_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <kiln/base/check.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace kiln::ckpt::internal {

Result<StagingBuffer> StagingBuffer::allocate(size_t bytes, bool pin) {
  KILN_CHECK_GT(bytes, 0u);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t capacity = (bytes + page - 1) / page * page;
  void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::io_error("checkpoint staging buffer of " + std::to_string(capacity) +
                            " bytes: mmap: " + std::strerror(errno));
  }
  // Only a hint: kernels without transparent huge pages just ignore it.
  (void)::madvise(p, capacity, MADV_HUGEPAGE);
  StagingBuffer buffer;
  buffer.data_ = static_cast<std::byte*>(p);
  buffer.capacity_ = capacity;
  // mlock faults every page in and keeps it resident. Without it, touch every page now so the
  // first save's copy does not pay for the page faults.
  buffer.pinned_ = pin && ::mlock(p, capacity) == 0;
  if (!buffer.pinned_) std::memset(p, 0, capacity);
  return buffer;
}

StagingBuffer::~StagingBuffer() {
  release();
}

StagingBuffer::StagingBuffer(StagingBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      pinned_(std::exchange(other.pinned_, false)) {}

StagingBuffer& StagingBuffer::operator=(StagingBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    pinned_ = std::exchange(other.pinned_, false);
  }
  return *this;
}

void StagingBuffer::release() {
  // munmap also drops the lock; it cannot fail for a mapping we made.
  if (data_ != nullptr) ::munmap(data_, capacity_);
  data_ = nullptr;
  capacity_ = 0;
  pinned_ = false;
}

}  // namespace kiln::ckpt::internal
