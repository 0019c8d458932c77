// See shm_link.h and, for the protocol, shm_inbox.h.
#include "comm/transport/shm/shm_link.h"

#include <kiln/base/check.h>

#include <cstdio>

namespace kiln::comm {
Result<void*> ShmLink::reserve(size_t bytes, uint32_t tag, Progress& progress) {
  KILN_CHECK(!reserved_) << "reserve() twice without commit() to rank " << peer_rank();
  KILN_CHECK_LE(bytes, out_.payload_bytes);
  const uint64_t m = sent_;
  // Slot m % slots is free once the peer consumed message m - slots.
  if (m - consumed_seen_ >= out_.slot_count) {
    ShmFifoControl* c = out_.control;
    const uint64_t needed = m + 1 - out_.slot_count;
    auto has_space = [&] {
      consumed_seen_ = c->consumed.load(std::memory_order_acquire);
      return consumed_seen_ >= needed;
    };
    KILN_RETURN_IF_ERROR(progress.wait(
        has_space, {"space", peer_rank(), &peer_host(), &c->space_bell, &c->space_sleepers}));
  }
  ShmSlotHeader* h = out_.header(m);
  h->bytes = static_cast<uint32_t>(bytes);
  h->tag = tag;
  reserved_ = true;
  return bytes <= kShmInlineBytes ? static_cast<void*>(h->inline_data)
                                  : static_cast<void*>(out_.payload(m));
}

Status ShmLink::commit(Progress& /*progress*/) {
  KILN_CHECK(reserved_) << "commit() without reserve() to rank " << peer_rank();
  reserved_ = false;
  const uint64_t m = sent_++;
  out_.header(m)->seq.store(m + 1, std::memory_order_release);
  ring_bell(&out_.control->data_bell, &out_.control->data_sleepers);
  return Status();
}

Result<const void*> ShmLink::peek(size_t bytes, uint32_t tag, Progress& progress) {
  KILN_CHECK(!peeked_) << "peek() twice without release() from rank " << peer_rank();
  const uint64_t m = received_;
  ShmSlotHeader* h = in_.header(m);
  auto arrived = [&] { return h->seq.load(std::memory_order_acquire) == m + 1; };
  ShmFifoControl* c = in_.control;
  KILN_RETURN_IF_ERROR(progress.wait(
      arrived, {"data", peer_rank(), &peer_host(), &c->data_bell, &c->data_sleepers}));
  if (h->bytes != bytes || h->tag != tag) {
    return progress.fail_at(
        peer_rank(),
        message_mismatch(m, "rank " + std::to_string(peer_rank()) + " (host " + peer_host() + ")",
                         h->bytes, h->tag, bytes, tag));
  }
  peeked_ = true;
  return bytes <= kShmInlineBytes ? static_cast<const void*>(h->inline_data)
                                  : static_cast<const void*>(in_.payload(m));
}

void ShmLink::release() {
  KILN_CHECK(peeked_) << "release() without peek() from rank " << peer_rank();
  peeked_ = false;
  ++received_;
  in_.control->consumed.store(received_, std::memory_order_release);
  ring_bell(&in_.control->space_bell, &in_.control->space_sleepers);
}

}  // namespace kiln::comm
