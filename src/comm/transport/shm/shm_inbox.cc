// See shm_inbox.h for the layout.
#include "comm/transport/shm/shm_inbox.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kiln::comm {
namespace {

constexpr uint64_t kInboxMagic = 0x4b494c4e53484d31ULL;  // "KILNSHM1"
constexpr uint32_t kInboxVersion = 2;                    // 2: ShmRankStatus::failed_coll_seq_plus1

struct alignas(kCacheLineBytes) InboxHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t owner_rank;
  uint64_t slot_payload_bytes;
  uint64_t slots;
  uint64_t fifos;
  uint64_t total_bytes;
  alignas(kCacheLineBytes) ShmAbortWord abort;
  alignas(kCacheLineBytes) ShmRankStatus status;
};

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

size_t slot_stride(const ShmGeometry& g) {
  return sizeof(ShmSlotHeader) + round_up(g.slot_payload_bytes, kCacheLineBytes);
}

size_t fifo_stride(const ShmGeometry& g) {
  return round_up(sizeof(ShmFifoControl), kCacheLineBytes) + g.slots * slot_stride(g);
}

size_t header_bytes() {
  return round_up(sizeof(InboxHeader), kCacheLineBytes);
}

std::string errno_text() {
  return std::strerror(errno);
}

// Where shm_open() puts its segments on Linux (glibc).
constexpr const char* kShmDir = "/dev/shm";

// MiB, or KiB below one MiB (a test's 256 KiB tmpfs).
std::string mib_text(uint64_t bytes) {
  if (bytes < (uint64_t{1} << 20)) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes >> 20) + " MiB";
}

// "/dev/shm has 63 MiB free", or why that is unknown.
std::string shm_free_text() {
  struct statvfs vfs {};
  if (statvfs(kShmDir, &vfs) != 0) return std::string(kShmDir) + ": " + errno_text();
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  const uint64_t size_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  return std::string(kShmDir) + " has " + mib_text(free_bytes) + " free of " + mib_text(size_bytes);
}

}  // namespace

size_t ShmInbox::total_bytes(const ShmGeometry& geometry) {
  return header_bytes() + geometry.fifos * fifo_stride(geometry);
}

Result<std::unique_ptr<ShmInbox>> ShmInbox::create(const std::string& name,
                                                   const ShmGeometry& geometry, int owner_rank) {
  const size_t bytes = total_bytes(geometry);
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Status::io_error("shm_open(" + name + ", create): " + errno_text());
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const std::string err = errno_text();
    close(fd);
    shm_unlink(name.c_str());
    return Status::io_error("ftruncate(" + name + ", " + std::to_string(bytes) + "): " + err);
  }
  // Reserve the pages now. A tmpfs hands out pages on first touch, so a /dev/shm too small for
  // the segment (Docker's default is 64 MiB) would otherwise pass ftruncate and mmap and kill the
  // rank with SIGBUS at the first page that does not fit, with no message at all.
  const int reserve_err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (reserve_err != 0) {
    close(fd);
    shm_unlink(name.c_str());
    return Status::io_error("shared-memory inbox " + name + " needs " + std::to_string(bytes) +
                            " bytes (" + mib_text(bytes) + ") in " + kShmDir + ": " +
                            std::strerror(reserve_err) + "; " + shm_free_text() +
                            " (is /dev/shm large enough? docker run --shm-size, or a tmpfs "
                            "size= mount option, makes it larger)");
  }
  // MAP_POPULATE pre-faults every page now: first touch costs ~1.5 us per page on this VM, which
  // would otherwise land in the first collectives.
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    const std::string err = errno_text();
    shm_unlink(name.c_str());
    return Status::io_error("mmap(" + name + ", " + std::to_string(bytes) + " bytes): " + err +
                            " (is /dev/shm large enough?)");
  }
  auto* header = static_cast<InboxHeader*>(base);
  header->version = kInboxVersion;
  header->owner_rank = static_cast<uint32_t>(owner_rank);
  header->slot_payload_bytes = geometry.slot_payload_bytes;
  header->slots = geometry.slots;
  header->fifos = geometry.fifos;
  header->total_bytes = bytes;
  header->status.waiting_on.store(-1, std::memory_order_relaxed);
  // The magic goes last: a peer that attaches early sees either nothing or a complete header.
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = kInboxMagic;
  return std::unique_ptr<ShmInbox>(
      new ShmInbox(name, static_cast<char*>(base), bytes, geometry, /*owner=*/true));
}

Result<std::unique_ptr<ShmInbox>> ShmInbox::attach(const std::string& name,
                                                   const ShmGeometry& geometry, int owner_rank) {
  const size_t bytes = total_bytes(geometry);
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Status::io_error("shm_open(" + name + "): " + errno_text());
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    return Status::corruption("shared-memory inbox " + name + " has " + std::to_string(st.st_size) +
                              " bytes, expected " + std::to_string(bytes));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Status::io_error("mmap(" + name + "): " + errno_text());
  std::unique_ptr<ShmInbox> inbox(
      new ShmInbox(name, static_cast<char*>(base), bytes, geometry, /*owner=*/false));
  const auto* header = static_cast<const InboxHeader*>(base);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (header->magic != kInboxMagic || header->version != kInboxVersion ||
      header->owner_rank != static_cast<uint32_t>(owner_rank) ||
      header->slot_payload_bytes != geometry.slot_payload_bytes ||
      header->slots != geometry.slots || header->fifos != geometry.fifos) {
    return Status::corruption("shared-memory inbox " + name +
                              " does not match this communicator (owner, version or geometry)");
  }
  return inbox;
}

ShmInbox::~ShmInbox() {
  if (owner_) unlink();
  munmap(base_, bytes_);
}

void ShmInbox::unlink() {
  if (!owner_ || unlinked_) return;
  shm_unlink(name_.c_str());
  unlinked_ = true;
}

ShmFifo ShmInbox::fifo(size_t index) const {
  ShmFifo f;
  char* start = base_ + header_bytes() + index * fifo_stride(geometry_);
  f.control = reinterpret_cast<ShmFifoControl*>(start);
  f.slots = start + round_up(sizeof(ShmFifoControl), kCacheLineBytes);
  f.slot_stride = slot_stride(geometry_);
  f.slot_count = geometry_.slots;
  f.payload_bytes = geometry_.slot_payload_bytes;
  return f;
}

ShmRankStatus* ShmInbox::rank_status() const {
  return &reinterpret_cast<InboxHeader*>(base_)->status;
}

ShmAbortWord* ShmInbox::abort_word() const {
  return &reinterpret_cast<InboxHeader*>(base_)->abort;
}

}  // namespace kiln::comm
