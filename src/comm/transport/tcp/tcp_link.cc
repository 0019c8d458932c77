// See tcp_link.h.
#include "comm/transport/tcp/tcp_link.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <kiln/base/check.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "comm/transport/progress.h"

namespace kiln::comm {
TcpLink::TcpLink(int peer_rank, std::string peer_host, std::vector<net::Fd> connections,
                 size_t message_bytes_max, size_t slots)
    : Link(peer_rank, std::move(peer_host)),
      message_bytes_max_(message_bytes_max),
      slot_count_(slots) {
  KILN_CHECK(!connections.empty()) << "TcpLink to rank " << peer_rank << " without connections";
  KILN_CHECK_GE(slots, connections.size()) << "every connection needs a slot in flight";
  const size_t k = connections.size();
  for (size_t i = 0; i < k; ++i) {
    Connection c;
    c.fd = std::move(connections[i]);
    c.next_send = i;
    c.next_recv = i;
    conns_.push_back(std::move(c));
  }
  // All staging memory is allocated here, once; nothing is allocated per message.
  send_slots_.resize(slots);
  recv_slots_.resize(slots);
  for (size_t i = 0; i < slots; ++i) {
    send_slots_[i].data = std::make_unique<char[]>(kFrameHeaderBytes + message_bytes_max);
    recv_slots_[i].data = std::make_unique<char[]>(kFrameHeaderBytes + message_bytes_max);
  }
}

TcpLink::~TcpLink() = default;

std::string TcpLink::peer_name() const {
  return "rank " + std::to_string(peer_rank()) + " (host " + peer_host() + ")";
}

Status TcpLink::fail(Status error) {
  if (error_.ok()) error_ = std::move(error);
  return error_;
}

void TcpLink::close_with(Status why) {
  if (closed_.ok()) closed_ = std::move(why);
}

Result<void*> TcpLink::reserve(size_t bytes, uint32_t tag, Progress& progress) {
  KILN_CHECK(!reserved_) << "reserve() twice without commit() to rank " << peer_rank();
  KILN_CHECK_LE(bytes, message_bytes_max_);
  if (broken()) return progress.fail_link(*this, why_broken());
  Slot& slot = send_slots_[committed_ % slot_count_];
  if (slot.busy) {
    KILN_RETURN_IF_ERROR(progress.wait([&] { return !slot.busy || broken(); },
                                       {"space", peer_rank(), &peer_host(), nullptr, nullptr}));
    if (broken()) return progress.fail_link(*this, why_broken());
  }
  slot.bytes = static_cast<uint32_t>(bytes);
  slot.tag = tag;
  reserved_ = true;
  return static_cast<void*>(slot.data.get() + kFrameHeaderBytes);
}

Status TcpLink::commit(Progress& progress) {
  KILN_CHECK(reserved_) << "commit() without reserve() to rank " << peer_rank();
  reserved_ = false;
  Slot& slot = send_slots_[committed_ % slot_count_];
  encode_frame_header({FrameKind::kData, slot.tag, slot.bytes},
                      reinterpret_cast<uint8_t*>(slot.data.get()));
  slot.busy = true;
  ++committed_;
  // Start writing now: the peer may be waiting for exactly this message.
  if (Status s = poll_io(); !s.ok()) return progress.fail_link(*this, s);
  if (!closed_.ok()) return progress.fail_link(*this, closed_);
  return Status();
}

Result<const void*> TcpLink::peek(size_t bytes, uint32_t tag, Progress& progress) {
  KILN_CHECK(!peeked_) << "peek() twice without release() from rank " << peer_rank();
  if (!error_.ok()) return progress.fail_link(*this, error_);
  Slot& slot = recv_slots_[released_ % slot_count_];
  if (!slot.busy) {
    // Messages that arrived before the peer closed are still delivered.
    KILN_RETURN_IF_ERROR(progress.wait([&] { return slot.busy || broken(); },
                                       {"data", peer_rank(), &peer_host(), nullptr, nullptr}));
    if (!slot.busy) return progress.fail_link(*this, why_broken());
  }
  if (slot.bytes != bytes || slot.tag != tag) {
    return progress.fail_at(
        peer_rank(), message_mismatch(released_, peer_name(), slot.bytes, slot.tag, bytes, tag));
  }
  peeked_ = true;
  return static_cast<const void*>(slot.data.get() + kFrameHeaderBytes);
}

void TcpLink::release() {
  KILN_CHECK(peeked_) << "release() without peek() from rank " << peer_rank();
  peeked_ = false;
  recv_slots_[released_ % slot_count_].busy = false;
  ++released_;
}

bool TcpLink::flushed() const {
  if (broken()) return true;  // nothing more will leave; an op that needs this link says so
  for (const Slot& s : send_slots_) {
    if (s.busy) return false;
  }
  return true;
}

void TcpLink::add_poll_fds(std::vector<pollfd>* fds) const {
  for (const Connection& c : conns_) {
    short events = 0;
    if (c.next_send < committed_) events |= POLLOUT;
    if (c.next_recv < released_ + slot_count_) events |= POLLIN;
    fds->push_back({c.fd.get(), events, 0});
  }
}

Status TcpLink::poll_io() {
  if (!error_.ok()) return error_;
  if (!closed_.ok()) return Status();
  for (Connection& c : conns_) {
    KILN_RETURN_IF_ERROR(progress_send(c));
    KILN_RETURN_IF_ERROR(progress_recv(c));
  }
  return Status();
}

Status TcpLink::progress_send(Connection& c) {
  const size_t k = conns_.size();
  while (c.next_send < committed_) {
    Slot& slot = send_slots_[c.next_send % slot_count_];
    const size_t frame_bytes = kFrameHeaderBytes + slot.bytes;
    const ssize_t n = send(c.fd.get(), slot.data.get() + c.send_offset, frame_bytes - c.send_offset,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status();
      close_with(
          Status::unavailable("connection to " + peer_name() + " failed: " + std::strerror(errno)));
      return Status();
    }
    c.send_offset += static_cast<size_t>(n);
    if (c.send_offset < frame_bytes) return Status();
    c.send_offset = 0;
    slot.busy = false;
    c.next_send += k;
  }
  return Status();
}

Status TcpLink::progress_recv(Connection& c) {
  const size_t k = conns_.size();
  // Receive only into a free slot: message m may use slot m % slots once m - slots is released.
  while (c.next_recv < released_ + slot_count_) {
    Slot& slot = recv_slots_[c.next_recv % slot_count_];
    char* dst;
    size_t want;
    if (!c.header_valid) {
      dst = reinterpret_cast<char*>(c.header) + c.recv_offset;
      want = kFrameHeaderBytes - c.recv_offset;
    } else {
      dst = slot.data.get() + c.recv_offset;
      want = kFrameHeaderBytes + slot.bytes - c.recv_offset;
    }
    const ssize_t n = want == 0 ? 0 : recv(c.fd.get(), dst, want, MSG_DONTWAIT);
    if (want != 0 && n == 0) {
      close_with(Status::unavailable("connection to " + peer_name() + " closed by peer"));
      return Status();
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status();
      close_with(
          Status::unavailable("connection to " + peer_name() + " failed: " + std::strerror(errno)));
      return Status();
    }
    c.recv_offset += static_cast<size_t>(n);
    if (!c.header_valid) {
      if (c.recv_offset < kFrameHeaderBytes) return Status();
      Result<FrameHeader> header = decode_frame_header(c.header, kFrameHeaderBytes,
                                                       static_cast<uint32_t>(message_bytes_max_));
      if (!header.ok()) {
        return fail(Status::aborted("malformed frame from " + peer_name() + ": " +
                                    header.status().message()));
      }
      if (header->kind == FrameKind::kAbort) {
        abort_culprit_ = static_cast<int>(header->tag) - 1;
        // The reason follows; read it synchronously (it is small and already sent).
        std::string reason(header->bytes, '\0');
        Status s = net::read_exact(c.fd.get(), reason.data(), reason.size(),
                                   Deadline::after_ms(1000), "abort reason");
        return fail(Status::aborted(
            peer_name() + " aborted: " + (s.ok() ? reason : std::string("(reason lost)"))));
      }
      std::memcpy(slot.data.get(), c.header, kFrameHeaderBytes);
      slot.bytes = header->bytes;
      slot.tag = header->tag;
      c.header_valid = true;
    }
    if (c.recv_offset < kFrameHeaderBytes + slot.bytes) continue;
    slot.busy = true;
    c.recv_offset = 0;
    c.header_valid = false;
    c.next_recv += k;
  }
  return Status();
}

void TcpLink::shutdown_connections() {
  for (Connection& c : conns_) {
    if (c.fd.valid()) shutdown(c.fd.get(), SHUT_RDWR);
  }
}

void TcpLink::finish_sending() {
  for (Connection& c : conns_) {
    if (c.fd.valid()) shutdown(c.fd.get(), SHUT_WR);
  }
}

void TcpLink::drain_until_eof(const Deadline& deadline) {
  char sink[4096];
  for (Connection& c : conns_) {
    while (c.fd.valid() && !deadline.expired()) {
      pollfd p{c.fd.get(), POLLIN, 0};
      const int64_t wait_ms = std::max<int64_t>(1, std::min<int64_t>(deadline.remaining_ms(), 50));
      if (poll(&p, 1, static_cast<int>(wait_ms)) <= 0) continue;
      const ssize_t n = recv(c.fd.get(), sink, sizeof(sink), MSG_DONTWAIT);
      if (n == 0) break;  // the peer's EOF
      if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) break;
    }
  }
}

void TcpLink::send_abort_and_close(const std::string& reason, int culprit) {
  const std::string text = reason.substr(0, kAbortReasonBytesMax);
  uint8_t header[kFrameHeaderBytes];
  encode_frame_header(
      {FrameKind::kAbort, static_cast<uint32_t>(culprit + 1), static_cast<uint32_t>(text.size())},
      header);
  for (Connection& c : conns_) {
    if (!c.fd.valid()) continue;
    if (c.send_offset == 0) {
      // Only between frames, or the abort would land inside a data frame. Best effort: one
      // non-blocking attempt; a full socket buffer just means the peer learns from the close.
      iovec iov[2] = {{header, kFrameHeaderBytes}, {const_cast<char*>(text.data()), text.size()}};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = 2;
      (void)sendmsg(c.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    shutdown(c.fd.get(), SHUT_RDWR);
  }
  close_with(Status::aborted("link to " + peer_name() + " closed after this rank aborted"));
}

}  // namespace kiln::comm
