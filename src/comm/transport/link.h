// Link: an ordered, message-based, bidirectional channel to one peer rank. Algorithms see only
// Links (never a transport); the shared-memory and TCP transports implement them.
//
// A message is a run of bytes with a tag. The sender reserves room for exactly one message,
// writes it in place, and commits it; the receiver peeks at the next message (which must have the
// size and tag it expects, or the collectives of the two ranks have diverged) and releases it.
// Writing and reading in place lets algorithms fuse their work into the transfer: a reduction
// kernel writes its result straight into the next rank's receive slot (NCCL's "simple" protocol).
//
//   sender:   void* p = reserve(bytes, tag); ...write bytes to p...; commit();
//   receiver: const void* p = peek(bytes, tag); ...read bytes from p...; release();
//
// Invariants: at most one reservation and one peek are open at a time per link; messages are
// delivered in commit order; a message never exceeds message_bytes_max(). Every blocking call goes
// through the Progress it is given, which bounds it by the op's deadline and the abort flag.
//
// Not thread-safe: one op runs at a time on a communicator, and it owns all links while it runs.
#ifndef KILN_COMM_TRANSPORT_LINK_H_
#define KILN_COMM_TRANSPORT_LINK_H_

#include <poll.h>

#include <cstddef>
#include <cstdint>

#include <string>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln::comm {

class Progress;

enum class LinkKind { kShm, kTcp };

class Link {
 public:
  virtual ~Link() = default;

  virtual LinkKind kind() const = 0;
  int peer_rank() const { return peer_rank_; }
  const std::string& peer_host() const { return peer_host_; }

  // The largest message this link carries in one piece.
  virtual size_t message_bytes_max() const = 0;

  // Room for one message of exactly `bytes` (<= message_bytes_max()), waiting for the peer to
  // free space. The pointer stays valid until commit().
  virtual Result<void*> reserve(size_t bytes, uint32_t tag, Progress& progress) = 0;
  // Publishes the reserved message.
  virtual Status commit(Progress& progress) = 0;

  // The next message, waiting for it to arrive. kAborted (naming the peer) if it is not `bytes`
  // long with `tag`. The pointer stays valid until release().
  virtual Result<const void*> peek(size_t bytes, uint32_t tag, Progress& progress) = 0;
  virtual void release() = 0;

  // Moves data without blocking (TCP I/O); called by Progress while it waits on anything.
  // Returns an error when the connection failed.
  virtual Status poll_io() { return Status(); }

  // True when every committed message has left this process (TCP); shm messages are visible to
  // the peer as soon as they are committed.
  virtual bool flushed() const { return true; }

  // When the link failed because the peer aborted: the rank that abort pointed at; else -1.
  virtual int abort_culprit() const { return -1; }

  // Appends the descriptors Progress should sleep on in poll() (TCP), with the events this link
  // is interested in right now.
  virtual void add_poll_fds(std::vector<pollfd>* fds) const { (void)fds; }

 protected:
  Link(int peer_rank, std::string peer_host)
      : peer_rank_(peer_rank), peer_host_(std::move(peer_host)) {}

 private:
  const int peer_rank_;
  const std::string peer_host_;
};

// The error when message `message` from a peer is not the one expected: the two ranks are
// running different collectives (or the same ones in a different order).
Status message_mismatch(uint64_t message, const std::string& peer, size_t got_bytes,
                        uint32_t got_tag, size_t want_bytes, uint32_t want_tag);

}  // namespace kiln::comm

#endif  // KILN_COMM_TRANSPORT_LINK_H_
