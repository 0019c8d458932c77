// The coordinator's HTTP/JSON API under /v1/, on obs::HttpServer (one event loop for every
// connection, bounded workers: idle and slow clients hold a buffer, never a worker).
//
//   POST   /v1/jobs                    {"spec": YAML text, "source": file name, "workdir": abs
//   path}
//                                      -> 201 {"id", "state"}; 400 names file, line and key
//   GET    /v1/jobs                    -> {"jobs": [status...]}          (the caller's team)
//   GET    /v1/jobs/{id}               -> status: id, name, state, attempt, nodes, team, restarts,
//                                         reason, waiting, goodput, submitted, spec (no secrets)
//                                         and "ranks" (rank, node, state, step, step_ms,
//                                         compute_ms, comm_exposed_ms, describe, straggler, z),
//                                         "signatures" (kind, text, attempt, rank, node, step)
//   GET    /v1/jobs/{id}/events?after=SEQ&limit=N -> {"events": [...]} oldest first
//   GET    /v1/jobs/{id}/steps?max=N   -> the job's step metrics as columns, thinned to at most
//                                         N points (64..4096, default 2000):
//                                         {"job", "count", "stored", "columns": {...}}
//                                         (step_json.h says which)
//   GET    /v1/cluster                 -> {"goodput", "ettr", "jobs_by_state", "nodes_by_state",
//                                          "idle_nodes", "storage_by_team": {team: bytes of
//                                          checkpoints}} (the caller's team's jobs and storage;
//                                          an admin's: all)
//   POST   /v1/jobs/{id}/cancel        -> status
//   GET    /v1/jobs/{id}/logs?rank=R&offset=O&bytes=N -> {"lines": [...], "next": offset}
//                                         read from the rank's node agent
//   GET    /v1/nodes                   -> {"nodes": [...]}
//   POST   /v1/nodes/{name}/cordon     {"reason": text}   (admin)
//   POST   /v1/nodes/{name}/uncordon                      (admin)
//   GET    /v1/preflight?nodes=a,b&level=quick|full  (admin) preflight of those nodes (default:
//                                      every node not down), facts read from their agents, the
//                                      results recorded on the nodes (preflight_gate.h):
//                                      {"findings": [...], "nodes": [{node, verdict, ...}],
//                                       "level", "lock"}; 503 while another one runs
//   POST   /v1/preflight               {"job": YAML text, "source", "workdir"[, "level", "team",
//                                      "trial_steps", "trial_nodes"]}  (admin) the same on the
//                                      nodes the job could run on (up, of a GPU model it takes),
//                                      at its `preflight:` level (quick when none); at full also
//                                      its trial run (kiln/preflight/trial.h) as the team's Unix
//                                      user: "trial", "job_findings"; 400 names a job that is
//                                      not `kiln train CONFIG`, 409 when no node can take it
//   POST   /v1/agent/report            an AgentReport -> AgentAnswer      (node token only)
//   GET    /metrics, /healthz          no token
//
// Errors are JSON {"error": message} with 400 (bad request or spec), 401 (no or unknown token),
// 403 (a token that may not do this), 404 (no such job or node, or another team's job), 503
// (the coordinator is at a limit). Every state-changing call is written to the audit log with
// who, what, which object and the result.
#ifndef KILN_SCHED_API_H_
#define KILN_SCHED_API_H_

#include <memory>
#include <string>

#include <kiln/base/log.h>
#include <kiln/obs/http_server.h>
#include <kiln/obs/metrics.h>
#include <kiln/sched/auth.h>
#include <kiln/sched/coordinator.h>
#include <kiln/sched/lifecycle.h>
#include <kiln/sched/preflight_gate.h>
#include <kiln/sched/state_store.h>

namespace kiln::sched {

// JSON forms shared by the API and its clients (the agent parses answers with them).
nlohmann::json to_json(const AgentReport& report);
Result<AgentReport> agent_report_from_json(const nlohmann::json& j);
nlohmann::json to_json(const AgentAnswer& answer);
Result<AgentAnswer> agent_answer_from_json(const nlohmann::json& j);
nlohmann::json job_status_json(const JobStatus& status);
// job_status_json with "ranks" and "signatures" (GET /v1/jobs/{id}).
nlohmann::json job_detail_json(const JobStatus& status);
nlohmann::json event_json(const EventRecord& event);
nlohmann::json node_json(const NodeRecord& node);

struct ApiContext {
  Coordinator* coordinator = nullptr;
  const TokenRegistry* tokens = nullptr;
  StateStore* audit = nullptr;
  // Presented to node agents when the coordinator reads a rank's log from them.
  std::string node_token;
  // Runs /v1/preflight's checks (and records them); null: the routes answer 503.
  PreflightGate* preflight = nullptr;
  // What each team's checkpoints take (GET /v1/cluster's storage_by_team); null: not measured.
  const Lifecycle* lifecycle = nullptr;
  Logger log;
};

// Registers the routes above on `server`. REQUIRES: everything in `context` outlives `server`.
void add_api_routes(obs::HttpServer* server, const ApiContext& context);

// The dashboard page: GET /ui (redirects to /ui/), /ui/ (the page), /ui/FILE (its scripts,
// styles and uPlot); no token (the files hold no data: the page sends the user's token with
// each API call it makes). Served with a Content-Security-Policy that allows only this origin.
void add_ui_routes(obs::HttpServer* server);

}  // namespace kiln::sched

#endif  // KILN_SCHED_API_H_
