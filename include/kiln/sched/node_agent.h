// The node agent in join mode (`kiln agent --join URL`): owns the rank processes of one node, as
// slurmd and the kubelet do, and keeps them in line with what the coordinator wants.
//
// The loop: report the node's whole state (every rank held: running with its newest step, or how
// it ended) to POST /v1/agent/report, and apply the answer, the whole set of ranks the node should
// run: start what is assigned and not held, stop what is marked stop or no longer assigned, let go
// of ended ranks the coordinator no longer lists. A rank's end is reported at once (the exit wakes
// the loop), everything else every heartbeat interval. When the coordinator cannot be reached the
// agent keeps its ranks running and retries (at most a second apart): a coordinator restart
// never stops a job.
//
// Each rank runs in its own process group, as the team's Unix user where the assignment names one,
// with its output captured into <work_dir>/<job>/attempt-<n>/rank-<r>.log (rank_log.h) and its
// flight recorder dumped into <work_dir>/<job>/attempt-<n>/flight/ when a collective fails; the
// agent reads those dumps to tell the coordinator which rank the failure points at. The agent
// serves GET /v1/logs to the coordinator (node token) so `kiln logs` reads them from anywhere.
#ifndef KILN_SCHED_NODE_AGENT_H_
#define KILN_SCHED_NODE_AGENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <kiln/base/clock.h>
#include <kiln/base/log.h>
#include <kiln/base/result.h>

namespace kiln::sched {

struct JoinOptions {
  std::string coordinator_url;  // http(s)://host:port
  std::string node_token;
  std::string ca_cert_path;  // for https
  std::string node_name;
  std::map<std::string, std::string> labels;  // rack=r1,switch=s1
  int slots = 1;
  std::string work_dir;  // created if absent
  // A job's directory under work_dir (its ranks' logs and flight dumps) is removed this long
  // after anything in it was last written, once the node runs none of its ranks; 0: never.
  int64_t keep_logs_ms = 0;
  // Directories whose free space preflight's health check reads (checkpoints, data), besides
  // work_dir (facts' `disks`).
  std::vector<std::string> check_dirs;
  // The address ranks on this node advertise for TCP links (KILN_COMM_ADDR); empty: their host
  // name's. The embedded cluster's nodes share this host: 127.0.0.1.
  std::string rank_address;
  // The agent's own endpoint (logs for the coordinator); port 0 picks one.
  std::string bind_address = "127.0.0.1";
  int port = 0;
  int64_t request_timeout_ms = 3000;
  const Clock* clock = &system_clock();
  // The kiln binary the full preflight's probes run (POST /v1/probe): the agent's own, so the
  // node's build is what is checked. Empty: probes are refused.
  std::string kiln_binary;
};

class JoinedAgent {
 public:
  // Starts the supervisor, the agent's HTTP endpoint and the report loop. Errors name the work
  // directory or the address that could not be used.
  static Result<std::unique_ptr<JoinedAgent>> start(JoinOptions options, Logger log);
  // Stops the loop and then every rank still running (SIGKILL to their groups): an agent that is
  // shut down takes its ranks with it. A killed agent (kill -9) leaves them running.
  ~JoinedAgent();
  JoinedAgent(const JoinedAgent&) = delete;
  JoinedAgent& operator=(const JoinedAgent&) = delete;

  // "http://127.0.0.1:PORT" of the agent's own endpoint.
  std::string address() const;
  // Reports that reached the coordinator so far.
  int64_t reports_sent() const;

  struct Impl;

 private:
  explicit JoinedAgent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::sched

#endif  // KILN_SCHED_NODE_AGENT_H_
