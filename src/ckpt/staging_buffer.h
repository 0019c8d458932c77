// StagingBuffer: the host memory a checkpoint is copied into at a step boundary, so the training
// state can change again while the copy is written. Private to kiln_ckpt.
//
// Page-aligned (mmap), transparent huge pages requested (fewer TLB misses while copying), and
// mlock'd when asked and allowed, so neither the copy nor the write ever waits on a page fault or
// on swap. Where mlock is refused (RLIMIT_MEMLOCK without CAP_IPC_LOCK) the pages are faulted in
// up front instead and pinned() is false. Movable, not copyable; unmapped on destruction.
#ifndef KILN_CKPT_STAGING_BUFFER_H_
#define KILN_CKPT_STAGING_BUFFER_H_

#include <cstddef>

#include <kiln/base/result.h>

namespace kiln::ckpt::internal {

class StagingBuffer {
 public:
  StagingBuffer() = default;
  // kIoError naming the size when the memory cannot be mapped. REQUIRES: bytes > 0.
  static Result<StagingBuffer> allocate(size_t bytes, bool pin);

  ~StagingBuffer();
  StagingBuffer(StagingBuffer&& other) noexcept;
  StagingBuffer& operator=(StagingBuffer&& other) noexcept;
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  bool pinned() const { return pinned_; }

 private:
  void release();

  std::byte* data_ = nullptr;
  size_t capacity_ = 0;  // mapped bytes (a whole number of pages)
  bool pinned_ = false;
};

}  // namespace kiln::ckpt::internal

#endif  // KILN_CKPT_STAGING_BUFFER_H_
