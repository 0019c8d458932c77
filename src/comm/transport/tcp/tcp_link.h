// TcpLink: a Link to a rank on another host, over one or more non-blocking TCP connections.
//
// Messages are striped round-robin: message m travels on connection m % k, and each connection
// carries its messages in order, so the receiver knows where message m comes from. Both sides
// keep `slots` staging buffers of message_bytes_max() bytes: reserve() hands out a send buffer
// (the algorithm writes, e.g. reduces, straight into it), commit() queues it, and poll_io() moves
// bytes whenever Progress waits on anything. Receives land in the staging buffers ahead of need,
// up to `slots` messages, which is the link's only buffering (bounded).
//
// A frame that fails to decode or an abort frame makes the link fail for good: poll_io (and so
// any op that waits on anything) returns the error, naming the peer rank and host. EOF or a
// socket error only closes the link: a peer that finished its last op and exited is no error
// until an op needs this link again, and then that op fails naming the peer.
#ifndef KILN_COMM_TRANSPORT_TCP_TCP_LINK_H_
#define KILN_COMM_TRANSPORT_TCP_TCP_LINK_H_

#include <memory>
#include <vector>

#include "comm/net/socket.h"
#include "comm/transport/link.h"
#include "comm/transport/tcp/tcp_frame.h"

namespace kiln::comm {

class TcpLink final : public Link {
 public:
  // `connections` must be connected, authenticated and non-blocking; at least one.
  TcpLink(int peer_rank, std::string peer_host, std::vector<net::Fd> connections,
          size_t message_bytes_max, size_t slots);
  ~TcpLink() override;

  LinkKind kind() const override { return LinkKind::kTcp; }
  size_t message_bytes_max() const override { return message_bytes_max_; }

  Result<void*> reserve(size_t bytes, uint32_t tag, Progress& progress) override;
  Status commit(Progress& progress) override;
  Result<const void*> peek(size_t bytes, uint32_t tag, Progress& progress) override;
  void release() override;
  Status poll_io() override;
  bool flushed() const override;
  void add_poll_fds(std::vector<pollfd>* fds) const override;
  int abort_culprit() const override { return abort_culprit_; }

  // Tells the peer this rank is stopping (best effort, never blocks) and shuts the connections,
  // so the peer's next read fails at once instead of waiting for its deadline.
  // `culprit` is the rank the failure points at (-1: none), passed on to the peer.
  void send_abort_and_close(const std::string& reason, int culprit);
  // Shuts the connections down without touching any other state: safe from another thread while
  // an op uses the link (its next I/O then fails at once).
  void shutdown_connections();
  // The orderly close of a communicator whose ops all finished, in two halves over all links:
  // finish_sending() shuts the write side (the peer reads everything sent, then EOF);
  // drain_until_eof() reads and drops what the peer still sends until its EOF or `deadline`.
  // Why: a socket closed with unread data resets the connection, and the reset can discard data
  // the peer has not read yet, such as the last messages of a barrier this rank already left.
  void finish_sending();
  void drain_until_eof(const Deadline& deadline);

 private:
  struct Slot {
    std::unique_ptr<char[]> data;  // frame header + payload
    uint32_t bytes = 0;
    uint32_t tag = 0;
    bool busy = false;  // send: queued or being written; recv: holds an unreleased message
  };
  struct Connection {
    net::Fd fd;
    uint64_t next_send = 0;  // the next message index this connection writes
    size_t send_offset = 0;  // bytes of that frame already written
    uint64_t next_recv = 0;  // the next message index this connection delivers
    size_t recv_offset = 0;  // bytes of that frame already read (header included)
    uint8_t header[kFrameHeaderBytes];
    bool header_valid = false;
  };

  Status progress_send(Connection& c);
  Status progress_recv(Connection& c);
  Status fail(Status error);
  void close_with(Status why);
  bool broken() const { return !error_.ok() || !closed_.ok(); }
  const Status& why_broken() const { return error_.ok() ? closed_ : error_; }
  std::string peer_name() const;

  const size_t message_bytes_max_;
  const size_t slot_count_;
  std::vector<Connection> conns_;
  std::vector<Slot> send_slots_;
  std::vector<Slot> recv_slots_;
  uint64_t committed_ = 0;  // messages committed for sending
  uint64_t released_ = 0;   // messages received and released
  bool reserved_ = false;
  bool peeked_ = false;
  Status error_;            // sticky: the link failed (abort frame, malformed frame)
  Status closed_;           // sticky: the connection is gone (EOF, reset); fatal only when needed
  int abort_culprit_ = -1;  // from the peer's abort frame
};

}  // namespace kiln::comm

#endif  // KILN_COMM_TRANSPORT_TCP_TCP_LINK_H_
