// ShmLink: a Link to a rank on the same host, over two FIFOs in shared memory: the one in the
// peer's inbox that this rank sends into, and the one in this rank's inbox that the peer sends
// into (see shm_inbox.h). No system call is made per message unless a side sleeps.
#ifndef KILN_COMM_TRANSPORT_SHM_SHM_LINK_H_
#define KILN_COMM_TRANSPORT_SHM_SHM_LINK_H_

#include "comm/transport/link.h"
#include "comm/transport/shm/shm_inbox.h"

namespace kiln::comm {

class ShmLink final : public Link {
 public:
  // `to_peer` lives in the peer's inbox, `from_peer` in ours. Both mappings must outlive the link.
  ShmLink(int peer_rank, std::string peer_host, ShmFifo to_peer, ShmFifo from_peer)
      : Link(peer_rank, std::move(peer_host)), out_(to_peer), in_(from_peer) {}

  LinkKind kind() const override { return LinkKind::kShm; }
  size_t message_bytes_max() const override { return out_.payload_bytes; }

  Result<void*> reserve(size_t bytes, uint32_t tag, Progress& progress) override;
  Status commit(Progress& progress) override;
  Result<const void*> peek(size_t bytes, uint32_t tag, Progress& progress) override;
  void release() override;

 private:
  ShmFifo out_;
  ShmFifo in_;
  uint64_t sent_ = 0;           // messages committed to the peer
  uint64_t consumed_seen_ = 0;  // the peer's `consumed` as last read (refreshed only when full)
  uint64_t received_ = 0;       // messages released from the peer
  bool reserved_ = false;
  bool peeked_ = false;
};

}  // namespace kiln::comm

#endif  // KILN_COMM_TRANSPORT_SHM_SHM_LINK_H_
