// Mesh: building a communicator's connections. Every rank publishes a RankRecord in the store,
// reads everyone else's, and ends up with one Link per peer: shared memory to ranks on its host
// (unless TCP is forced), TCP to the others (a full mesh: every remote peer gets
// tcp_connections_per_peer authenticated connections, opened by the lower rank).
//
// Store keys, under options.store_prefix:
//   rank/<r>   rank r's RankRecord (JSON)
//   shm/<r>    the name of rank r's shared-memory inbox (ranks with local peers only)
//   ready/<r>  rank r has attached every local peer's inbox (its own inbox can be unlinked)
#ifndef KILN_COMM_MESH_H_
#define KILN_COMM_MESH_H_

#include <memory>
#include <string>
#include <vector>

#include <kiln/base/log.h>
#include <kiln/base/result.h>
#include <kiln/comm/communicator.h>
#include <kiln/comm/machine_profile.h>
#include <kiln/comm/store.h>

#include "comm/comm_env.h"
#include "comm/topology.h"
#include "comm/transport/link.h"
#include "comm/transport/progress.h"
#include "comm/transport/shm/shm_inbox.h"
#include "comm/transport/tcp/tcp_link.h"

namespace kiln::comm {

struct Mesh {
  Mesh() = default;
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  std::vector<RankRecord> records;                      // by rank
  std::vector<int> ring;                                // ring order of all ranks
  std::vector<std::unique_ptr<Link>> links;             // by rank; null for this rank
  std::unique_ptr<ShmInbox> inbox;                      // this rank's, if it has local peers
  std::vector<std::unique_ptr<ShmInbox>> peer_inboxes;  // by rank; mapped local peers' inboxes
  std::vector<PeerProcess> local_peers;                 // watched for death (pidfds)
  std::vector<Link*> tcp_links;                         // the TCP ones among `links`
  std::vector<TcpLink*> tcp_link_impls;                 // same, for abort handling
};

// Builds the mesh. `host` is the resolved host name of this rank; `env` the parsed environment
// (its KILN_COMM_ADDR is used when options.tcp_interface is empty). Fails with an error naming
// what did not come together within options.setup_timeout_ms, and with kInvalidArgument naming
// the host name when a rank that needs TCP has no address (see resolve_tcp_address).
// `profile`, when not null, is this machine's: its figures go into this rank's record.
Result<std::unique_ptr<Mesh>> build_mesh(const CommOptions& options, const std::string& host,
                                         const CommEnv& env, const MachineProfile* profile,
                                         Store* store, const Logger& log);

// The IPv4 address a rank binds and advertises: the address of interface `iface` (a name such as
// "eth0", or an IP literal), or when empty the address `host` resolves to. kInvalidArgument for
// an interface without an IPv4 address, and for a host name that does not resolve (naming it and
// KILN_COMM_ADDR, the fix); never a silent 127.0.0.1.
Result<std::string> resolve_tcp_address(const std::string& iface, const std::string& host);

}  // namespace kiln::comm

#endif  // KILN_COMM_MESH_H_
