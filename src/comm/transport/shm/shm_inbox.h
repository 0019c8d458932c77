// ShmInbox: the shared-memory segment one rank receives in from the other ranks on its host.
//
// Layout (all offsets multiples of 64, so no two writers share a cache line):
//
//   inbox    := header fifo[fifos]
//   header   := magic u64 | version u32 | owner_rank u32 | slot_payload_bytes u64 | slots u64 |
//               fifos u64 | total_bytes u64 | pad to 64 | abort (ShmAbortWord, padded to 64) |
//               status (ShmRankStatus: last collective started, rank waited for, in an op)
//   fifo     := control slot[slots]
//   control  := consumed (u64, own line) | space_bell u32, space_sleepers u32 (own line) |
//               data_bell u32, data_sleepers u32 (own line)
//   slot     := slot_header (64 bytes: seq u64 | bytes u32 | tag u32 | inline[48]) |
//               payload[slot_payload_bytes rounded up to 64]
//
// FIFO i carries messages from the i-th local peer to the owner. Message m occupies slot
// m % slots; the sender writes it, then publishes seq = m + 1 (release); the receiver reads it
// after seeing that seq (acquire), then publishes consumed = m + 1. The sender may reuse slot
// m % slots once consumed >= m + 1 - slots. Messages of up to 48 bytes travel inside the slot
// header, so a small message is one cache line from sender to receiver.
//
// The owner creates the segment (shm_open + ftruncate + mmap, pre-faulted) and, once every peer
// has attached, unlinks its name, so a crash leaves nothing in /dev/shm after that point.
#ifndef KILN_COMM_TRANSPORT_SHM_SHM_INBOX_H_
#define KILN_COMM_TRANSPORT_SHM_SHM_INBOX_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <kiln/base/result.h>
#include <kiln/base/status.h>

#include "comm/transport/progress.h"

namespace kiln::comm {

inline constexpr size_t kCacheLineBytes = 64;
inline constexpr size_t kShmInlineBytes = 48;  // payload that fits in the slot header's line

struct alignas(kCacheLineBytes) ShmFifoControl {
  alignas(kCacheLineBytes) std::atomic<uint64_t> consumed;    // written by the receiver
  alignas(kCacheLineBytes) std::atomic<uint32_t> space_bell;  // the sender sleeps on it
  std::atomic<uint32_t> space_sleepers;
  alignas(kCacheLineBytes) std::atomic<uint32_t> data_bell;  // the receiver sleeps on it
  std::atomic<uint32_t> data_sleepers;
};

struct alignas(kCacheLineBytes) ShmSlotHeader {
  std::atomic<uint64_t> seq;  // m + 1 once message m is complete
  uint32_t bytes;
  uint32_t tag;
  char inline_data[kShmInlineBytes];
};
static_assert(sizeof(ShmSlotHeader) == kCacheLineBytes, "a slot header is one cache line");
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free");

struct ShmGeometry {
  size_t slot_payload_bytes = 0;  // largest message
  size_t slots = 0;               // messages in flight per FIFO
  size_t fifos = 0;               // local peers that send to this inbox
};

// A view of one FIFO inside a mapped inbox.
struct ShmFifo {
  ShmFifoControl* control = nullptr;
  char* slots = nullptr;  // first slot
  size_t slot_stride = 0;
  size_t slot_count = 0;
  size_t payload_bytes = 0;
  ShmSlotHeader* header(uint64_t message) const {
    return reinterpret_cast<ShmSlotHeader*>(slots + (message % slot_count) * slot_stride);
  }
  char* payload(uint64_t message) const {
    return slots + (message % slot_count) * slot_stride + sizeof(ShmSlotHeader);
  }
};

class ShmInbox {
 public:
  // Creates and maps a new segment named `name` ("/kiln-..."), zeroed and pre-faulted.
  // kIoError names the segment and the failing call (a full /dev/shm, say).
  static Result<std::unique_ptr<ShmInbox>> create(const std::string& name,
                                                  const ShmGeometry& geometry, int owner_rank);
  // Maps an existing segment and checks its header against `geometry` and `owner_rank`
  // (kCorruption when they differ: two jobs collided on a name, or a stale segment).
  static Result<std::unique_ptr<ShmInbox>> attach(const std::string& name,
                                                  const ShmGeometry& geometry, int owner_rank);
  ~ShmInbox();
  ShmInbox(const ShmInbox&) = delete;
  ShmInbox& operator=(const ShmInbox&) = delete;

  // Removes the name from /dev/shm; existing mappings stay valid. Idempotent.
  void unlink();

  ShmFifo fifo(size_t index) const;
  ShmAbortWord* abort_word() const;
  // The owner's status (what it is doing), read by local peers to diagnose stalls.
  ShmRankStatus* rank_status() const;
  const std::string& name() const { return name_; }

  // Bytes a segment of this geometry occupies.
  static size_t total_bytes(const ShmGeometry& geometry);

 private:
  ShmInbox(std::string name, char* base, size_t bytes, const ShmGeometry& geometry, bool owner)
      : name_(std::move(name)), base_(base), bytes_(bytes), geometry_(geometry), owner_(owner) {}

  std::string name_;
  char* base_;
  size_t bytes_;
  ShmGeometry geometry_;
  bool owner_;
  bool unlinked_ = false;
};

}  // namespace kiln::comm

#endif  // KILN_COMM_TRANSPORT_SHM_SHM_INBOX_H_
