// See mesh.h.
//
// The connection handshake, after the mutual HMAC authentication of auth.h:
//
//   hello := magic u32 ("KLNH") | version u32 (1) | from_rank u32 | connection u32 |
//            prefix_hash u64                                              (24 bytes, LE)
//   ack   := magic u32 ("KLNA")
//
// prefix_hash (XXH3 of the store prefix) keeps a rank of one communicator from joining another
// that happens to listen on a reused port.
#include "comm/mesh.h"

#include <kiln/base/machine_cache.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <unistd.h>

#include <kiln/base/checksum.h>
#include <kiln/base/cpu_set.h>
#include <kiln/base/endian.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "comm/auth.h"
#include "comm/net/socket.h"
#include "comm/transport/shm/shm_link.h"

namespace kiln::comm {
namespace {

constexpr uint32_t kHelloMagic = 0x484e4c4b;  // "KLNH"
constexpr uint32_t kAckMagic = 0x414e4c4b;    // "KLNA"
constexpr uint32_t kHelloVersion = 1;
constexpr size_t kHelloBytes = 24;
constexpr const char* kAuthPurpose = "kiln-comm/1";
// A peer that connects must finish authenticating within this long, or it is dropped.
constexpr int64_t kHandshakeTimeoutMs = 10'000;
constexpr int kListenBacklog = 1024;

std::string key(const CommOptions& o, const char* kind, int rank) {
  return o.store_prefix + "/" + kind + "/" + std::to_string(rank);
}

std::string peer_name(const RankRecord& r) {
  return "rank " + std::to_string(r.rank) + " (host " + r.host + ")";
}

// Everything ranks must agree on for their links to interoperate.
std::string config_signature(const CommOptions& o) {
  return "transport=" + std::to_string(static_cast<int>(o.transport)) +
         ";shm=" + std::to_string(o.shm_message_bytes) + "x" + std::to_string(o.shm_slots) +
         ";tcp=" + std::to_string(o.tcp_message_bytes) + "x" + std::to_string(o.tcp_slots) + "x" +
         std::to_string(o.tcp_connections_per_peer);
}

bool uses_shm(const CommOptions& o, const RankRecord& a, const RankRecord& b) {
  return o.transport == TransportPolicy::kAuto && a.host == b.host;
}

Result<std::vector<RankRecord>> exchange_records(const CommOptions& o, const RankRecord& mine,
                                                 const std::string& signature, Store* store,
                                                 const Deadline& deadline) {
  std::string json = record_to_json(mine);
  KILN_RETURN_IF_ERROR(store->set(key(o, "rank", mine.rank), json));
  KILN_RETURN_IF_ERROR(store->set(key(o, "config", mine.rank), signature));
  std::vector<std::string> keys;
  for (int r = 0; r < o.world_size; ++r)
    keys.push_back(key(o, "rank", r));
  Status waited = store->wait(keys, deadline.remaining_ms());
  if (!waited.ok()) return waited.with_context("rendezvous: not every rank published its record");
  std::vector<RankRecord> records(o.world_size);
  for (int r = 0; r < o.world_size; ++r) {
    KILN_ASSIGN_OR_RETURN(std::string text, store->get(key(o, "rank", r), deadline.remaining_ms()));
    Result<RankRecord> rec = record_from_json(text);
    if (!rec.ok())
      return rec.status().with_context("rendezvous: record of rank " + std::to_string(r));
    if (rec->rank != r) {
      return Status::corruption("rendezvous: key for rank " + std::to_string(r) +
                                " holds the record of rank " + std::to_string(rec->rank));
    }
    KILN_ASSIGN_OR_RETURN(std::string sig,
                          store->get(key(o, "config", r), deadline.remaining_ms()));
    if (sig != signature) {
      return Status::invalid_argument("rendezvous: rank " + std::to_string(r) +
                                      " uses communicator options '" + sig + "', this rank '" +
                                      signature + "'");
    }
    records[r] = std::move(*rec);
  }
  return records;
}

// Accepts the connections lower-ranked remote peers open to this rank.
class Acceptor {
 public:
  Acceptor(int listen_fd, const CommOptions& o, const std::vector<RankRecord>& records,
           uint64_t prefix_hash, int expected, const Deadline& deadline, const Logger& log)
      : listen_fd_(listen_fd),
        o_(o),
        records_(records),
        prefix_hash_(prefix_hash),
        expected_(expected),
        deadline_(deadline),
        log_(log) {
    if (expected_ > 0) thread_ = std::thread([this] { run(); });
  }
  ~Acceptor() {
    if (thread_.joinable()) thread_.join();
  }

  // Waits for the accept loop; returns the connections by (rank, index).
  Result<std::map<int, std::vector<net::Fd>>> take() {
    if (thread_.joinable()) thread_.join();
    if (!status_.ok()) return status_;
    return std::move(conns_);
  }

 private:
  void run() {
    int accepted = 0;
    while (accepted < expected_) {
      std::string from;
      Result<net::Fd> fd = net::accept_tcp(listen_fd_, deadline_, &from);
      if (!fd.ok()) {
        status_ = Status::timeout(
            "rendezvous: only " + std::to_string(accepted) + " of " + std::to_string(expected_) +
            " incoming connections arrived before the deadline (" + fd.status().message() + ")");
        return;
      }
      Status s = admit(std::move(*fd), from);
      if (s.ok()) {
        ++accepted;
      } else {
        // A stray or hostile connection (or a rank of another job): drop it and keep listening.
        log_.warn("refused a connection", {{"from", from}, {"error", s.to_string()}});
      }
    }
  }

  Status admit(net::Fd fd, const std::string& from) {
    const Deadline handshake = deadline_.remaining_ms() < kHandshakeTimeoutMs
                                   ? deadline_
                                   : Deadline::after_ms(kHandshakeTimeoutMs);
    KILN_RETURN_IF_ERROR(
        authenticate_as_server(fd.get(), o_.job_token, kAuthPurpose, handshake, from));
    uint8_t hello[kHelloBytes];
    KILN_RETURN_IF_ERROR(net::read_exact(fd.get(), hello, sizeof(hello), handshake, "hello"));
    const uint32_t magic = decode_u32_le(hello);
    const uint32_t version = decode_u32_le(hello + 4);
    const uint32_t rank = decode_u32_le(hello + 8);
    const uint32_t index = decode_u32_le(hello + 12);
    const uint64_t hash = decode_u64_le(hello + 16);
    if (magic != kHelloMagic || version != kHelloVersion) {
      return Status::aborted("hello from " + from + " has a bad magic or version");
    }
    if (hash != prefix_hash_) {
      return Status::aborted("hello from " + from + " belongs to another communicator");
    }
    const int me = o_.rank;
    if (rank >= static_cast<uint32_t>(me) || uses_shm(o_, records_[me], records_[rank]) ||
        index >= static_cast<uint32_t>(o_.tcp_connections_per_peer)) {
      return Status::aborted("hello from " + from + " claims rank " + std::to_string(rank) +
                             " connection " + std::to_string(index) +
                             ", which does not connect to this rank");
    }
    std::vector<net::Fd>& slots = conns_[static_cast<int>(rank)];
    slots.resize(o_.tcp_connections_per_peer);
    if (slots[index].valid()) {
      return Status::aborted("duplicate connection " + std::to_string(index) + " from rank " +
                             std::to_string(rank));
    }
    uint8_t ack[4];
    encode_u32_le(kAckMagic, ack);
    KILN_RETURN_IF_ERROR(net::write_all(fd.get(), ack, sizeof(ack), handshake, "hello ack"));
    slots[index] = std::move(fd);
    return Status();
  }

  const int listen_fd_;
  const CommOptions& o_;
  const std::vector<RankRecord>& records_;
  const uint64_t prefix_hash_;
  const int expected_;
  const Deadline deadline_;
  const Logger& log_;
  std::map<int, std::vector<net::Fd>> conns_;  // written by the thread; read after join
  Status status_;
  std::thread thread_;
};

Result<net::Fd> connect_to(const CommOptions& o, const RankRecord& peer, int index,
                           uint64_t prefix_hash, const Deadline& deadline) {
  const std::string name = peer_name(peer);
  KILN_ASSIGN_OR_RETURN(net::Fd fd, net::connect_tcp({peer.tcp_address, peer.tcp_port}, deadline));
  KILN_RETURN_IF_ERROR(authenticate_as_client(fd.get(), o.job_token, kAuthPurpose, deadline, name));
  uint8_t hello[kHelloBytes];
  encode_u32_le(kHelloMagic, hello);
  encode_u32_le(kHelloVersion, hello + 4);
  encode_u32_le(static_cast<uint32_t>(o.rank), hello + 8);
  encode_u32_le(static_cast<uint32_t>(index), hello + 12);
  encode_u64_le(prefix_hash, hello + 16);
  KILN_RETURN_IF_ERROR(
      net::write_all(fd.get(), hello, sizeof(hello), deadline, "hello to " + name));
  uint8_t ack[4];
  KILN_RETURN_IF_ERROR(
      net::read_exact(fd.get(), ack, sizeof(ack), deadline, "hello ack from " + name));
  if (decode_u32_le(ack) != kAckMagic) return Status::aborted(name + " refused the hello");
  return fd;
}

std::string random_hex() {
  std::random_device device;
  const uint64_t v = (static_cast<uint64_t>(device()) << 32) | device();
  return checksum_hex(v);
}

Status build_tcp_links(const CommOptions& o, Mesh& mesh, int listen_fd, uint64_t prefix_hash,
                       const Deadline& deadline, const Logger& log) {
  const int me = o.rank;
  int expected = 0;
  bool any_remote = false;
  for (int r = 0; r < o.world_size; ++r) {
    if (r == me || uses_shm(o, mesh.records[me], mesh.records[r])) continue;
    any_remote = true;
    if (r < me) expected += o.tcp_connections_per_peer;
  }
  if (!any_remote) return Status();
  if (o.job_token.empty()) {
    return Status::invalid_argument("TCP links need a job token (CommOptions::job_token)");
  }
  Acceptor acceptor(listen_fd, o, mesh.records, prefix_hash, expected, deadline, log);
  std::map<int, std::vector<net::Fd>> outgoing;
  for (int r = me + 1; r < o.world_size; ++r) {
    if (uses_shm(o, mesh.records[me], mesh.records[r])) continue;
    for (int c = 0; c < o.tcp_connections_per_peer; ++c) {
      Result<net::Fd> fd = connect_to(o, mesh.records[r], c, prefix_hash, deadline);
      if (!fd.ok())
        return fd.status().with_context("rendezvous: connecting to " + peer_name(mesh.records[r]));
      outgoing[r].push_back(std::move(*fd));
    }
  }
  KILN_ASSIGN_OR_RETURN(auto incoming, acceptor.take());
  for (auto& [r, fds] : incoming)
    outgoing[r] = std::move(fds);
  for (auto& [r, fds] : outgoing) {
    for (net::Fd& fd : fds) {
      KILN_RETURN_IF_ERROR(net::set_nonblocking(fd.get(), true));
      KILN_RETURN_IF_ERROR(net::set_stream_options(fd.get(), o.tcp_socket_buffer_bytes));
    }
    auto link = std::make_unique<TcpLink>(r, mesh.records[r].host, std::move(fds),
                                          o.tcp_message_bytes, o.tcp_slots);
    mesh.tcp_links.push_back(link.get());
    mesh.tcp_link_impls.push_back(link.get());
    mesh.links[r] = std::move(link);
  }
  return Status();
}

// Every pair of ranks that talks over TCP has both addresses: this rank's (else `unresolved`, why
// it has none) and the peer's (else an error naming the peer and its host).
Status check_tcp_addresses(const CommOptions& o, const std::vector<RankRecord>& records,
                           const Status& unresolved) {
  const int me = o.rank;
  for (int r = 0; r < o.world_size; ++r) {
    if (r == me || uses_shm(o, records[me], records[r])) continue;
    if (records[me].tcp_address.empty()) {
      return unresolved.with_context("TCP link to " + peer_name(records[r]));
    }
    if (records[r].tcp_address.empty()) {
      return Status::invalid_argument(
          peer_name(records[r]) +
          " advertised no TCP address: its host name does not resolve; set KILN_COMM_ADDR (its "
          "IPv4 address or interface name) on that rank");
    }
  }
  return Status();
}

Status build_shm_links(const CommOptions& o, Mesh& mesh, Store* store, const Deadline& deadline) {
  const int me = o.rank;
  std::vector<int> local;  // ranks sharing memory with this one, in rank order, me included
  for (int r = 0; r < o.world_size; ++r) {
    if (r == me || uses_shm(o, mesh.records[me], mesh.records[r])) local.push_back(r);
  }
  if (local.size() < 2) return Status();
  auto position = [&](int rank) {
    return static_cast<size_t>(std::find(local.begin(), local.end(), rank) - local.begin());
  };
  ShmGeometry geometry;
  geometry.slot_payload_bytes = o.shm_message_bytes;
  geometry.slots = o.shm_slots;
  geometry.fifos = local.size();  // FIFO j carries messages from local rank j; ours stays unused
  const std::string name = "/kiln-" + checksum_hex(xxh3(o.store_prefix)).substr(0, 8) + "-r" +
                           std::to_string(me) + "-" + random_hex();
  KILN_ASSIGN_OR_RETURN(mesh.inbox, ShmInbox::create(name, geometry, me));
  KILN_RETURN_IF_ERROR(store->set(key(o, "shm", me), name));
  std::vector<std::string> keys;
  for (int r : local)
    keys.push_back(key(o, "shm", r));
  Status waited = store->wait(keys, deadline.remaining_ms());
  if (!waited.ok())
    return waited.with_context("rendezvous: a local peer did not publish its inbox");
  for (int r : local) {
    if (r == me) continue;
    KILN_ASSIGN_OR_RETURN(std::string peer_inbox,
                          store->get(key(o, "shm", r), deadline.remaining_ms()));
    Result<std::unique_ptr<ShmInbox>> attached = ShmInbox::attach(peer_inbox, geometry, r);
    if (!attached.ok()) {
      return attached.status().with_context("rendezvous: inbox of " + peer_name(mesh.records[r]));
    }
    mesh.links[r] = std::make_unique<ShmLink>(
        r, mesh.records[r].host, (*attached)->fifo(position(me)), mesh.inbox->fifo(position(r)));
    mesh.peer_inboxes[r] = std::move(*attached);
    PeerProcess peer;
    peer.rank = r;
    peer.host = mesh.records[r].host;
    peer.pid = mesh.records[r].pid;
    peer.pidfd = peer.pid == getpid() ? -1 : open_pidfd(peer.pid);
    mesh.local_peers.push_back(peer);
  }
  // Once every local peer has mapped our inbox its name can go: nothing is left in /dev/shm even
  // if every rank is killed from here on.
  KILN_RETURN_IF_ERROR(store->set(key(o, "ready", me), "1"));
  keys.clear();
  for (int r : local)
    keys.push_back(key(o, "ready", r));
  waited = store->wait(keys, deadline.remaining_ms());
  if (!waited.ok()) return waited.with_context("rendezvous: a local peer did not attach");
  mesh.inbox->unlink();
  return Status();
}

}  // namespace

Mesh::~Mesh() {
  for (PeerProcess& p : local_peers) {
    if (p.pidfd >= 0) close(p.pidfd);
  }
}

Result<std::string> resolve_tcp_address(const std::string& iface, const std::string& host) {
  if (!iface.empty()) {
    in_addr probe{};
    if (inet_pton(AF_INET, iface.c_str(), &probe) == 1) return iface;
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return Status::io_error("getifaddrs failed");
    std::string found;
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || iface != a->ifa_name) {
        continue;
      }
      char buf[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
      found = buf;
      break;
    }
    freeifaddrs(list);
    if (found.empty()) {
      return Status::invalid_argument("TCP interface '" + iface +
                                      "' is neither an IPv4 address nor an interface with one");
    }
    return found;
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc == 0 && result != nullptr) {
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(result->ai_addr)->sin_addr, buf,
              sizeof(buf));
    freeaddrinfo(result);
    return std::string(buf);
  }
  if (result != nullptr) freeaddrinfo(result);
  return Status::invalid_argument(
      "host name '" + host + "' does not resolve to an IPv4 address (" +
      (rc == 0 ? std::string("no address") : std::string(gai_strerror(rc))) +
      "), so this rank has no address to advertise for TCP links: set KILN_COMM_ADDR to its IPv4 "
      "address or interface name (e.g. eth0)");
}

Result<std::unique_ptr<Mesh>> build_mesh(const CommOptions& o, const std::string& host,
                                         const CommEnv& env, const MachineProfile* profile,
                                         Store* store, const Logger& log) {
  auto mesh = std::make_unique<Mesh>();
  mesh->links.resize(o.world_size);
  mesh->peer_inboxes.resize(o.world_size);
  RankRecord mine;
  mine.rank = o.rank;
  mine.host = host;
  mine.pid = getpid();
  mine.labels = o.topology;
  mine.machine = this_boot_id();
  if (Result<CpuSet> cpus = CpuSet::of_this_thread(); cpus.ok()) mine.cpus = cpus->to_string();
  if (profile != nullptr) {
    mine.handoff_us = profile->cross_core ? profile->handoff_ns.p50 / 1000.0 : 0;
    mine.copy_gbps = profile->copy_gbps;
    mine.reduce_gbps = profile->reduce_gbps;
  }
  if (o.world_size == 1) {
    mesh->records.push_back(mine);
    mesh->ring = {0};
    return mesh;
  }
  const Deadline deadline = Deadline::after_ms(o.setup_timeout_ms);
  // An explicit interface or address that does not work is an error now. A host name that does
  // not resolve is one only if some peer needs TCP to this rank (check_tcp_addresses): ranks that
  // all share memory need no address.
  const std::string& iface = o.tcp_interface.empty() ? env.tcp_address : o.tcp_interface;
  const Result<std::string> address = resolve_tcp_address(iface, host);
  if (!address.ok() && !iface.empty()) return address.status();
  net::Fd listener;
  if (address.ok()) {
    mine.tcp_address = *address;
    KILN_ASSIGN_OR_RETURN(listener, net::listen_tcp(mine.tcp_address, o.tcp_port_lo, o.tcp_port_hi,
                                                    kListenBacklog, &mine.tcp_port));
  }
  KILN_ASSIGN_OR_RETURN(mesh->records,
                        exchange_records(o, mine, config_signature(o), store, deadline));
  KILN_RETURN_IF_ERROR(check_tcp_addresses(o, mesh->records, address.status()));
  mesh->ring = ring_order(mesh->records);
  const uint64_t prefix_hash = xxh3(o.store_prefix);
  KILN_RETURN_IF_ERROR(build_tcp_links(o, *mesh, listener.get(), prefix_hash, deadline, log));
  KILN_RETURN_IF_ERROR(build_shm_links(o, *mesh, store, deadline));
  return mesh;
}

}  // namespace kiln::comm
