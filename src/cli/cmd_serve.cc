// `kiln serve`: the coordinator. State (SQLite, tokens, the secret key, the agents' work
// directories and logs) lives under --state-dir; with --local-nodes N it also runs an embedded
// cluster of N node agents on this host (2 per rack), so one command gives a whole cluster.
//
// What survives what: the store daemon and the local agents run detached, so SIGKILL of this
// process leaves every job running; started again with the same --state-dir it adopts them (by
// the pids in its state) and the agents report to it again. SIGINT/SIGTERM is an orderly
// shutdown of the embedded cluster: the local agents (and their ranks) and the store stop too.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <csignal>
#include <fstream>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include <kiln/base/file_system.h>
#include <kiln/comm/store.h>
#include <kiln/obs/http_server.h>
#include <kiln/obs/metrics.h>
#include <kiln/obs/metrics_endpoint.h>
#include <kiln/preflight/health.h>
#include <kiln/preflight/stack.h>
#include <kiln/sched/api.h>
#include <kiln/sched/auth.h>
#include <kiln/sched/coordinator.h>
#include <kiln/sched/daemons.h>
#include <kiln/sched/lifecycle.h>
#include <kiln/sched/policy.h>
#include <kiln/sched/preflight_gate.h>
#include <kiln/sched/queue_config.h>
#include <kiln/sched/secret_box.h>
#include <kiln/sched/slurm.h>
#include <kiln/sched/state_store.h>

#include "cli/command.h"
#include "cli/health_flags.h"
#include "cli/serve_metrics.h"
#include "cli/server_address.h"
#include "cli/signals.h"

namespace kiln::cli {
namespace {

constexpr int kDefaultPort = 7470;
constexpr int64_t kTickMs = 100;
constexpr int64_t kDaemonStartMs = 15000;

struct ServeFlags {
  std::string state_dir;
  std::string bind = "127.0.0.1";
  int port = -1;  // -1: the port this state dir served on before, else kDefaultPort
  int local_nodes = 0;
  int slots_per_node = 2;
  std::string auth_file;
  std::string node_token_file;
  int64_t node_timeout_ms = 5000;
  int cordon_faults = 3;
  int64_t cordon_window_s = 600;
  int connections_max = 16384;
  std::string tls_cert;
  std::string tls_key;
  std::string queues_file;
  int64_t preempt_grace_s = 30;
  int64_t preempt_min_runtime_s = 600;
  bool json = false;
  // --executor slurm: nodes and allocations from Slurm (kiln/sched/slurm.h).
  std::string executor = "local";
  std::string slurm_partition;
  std::string slurm_prefix = "kiln";
  std::string slurm_placement = "kiln";
  std::string lock_path;
  std::string rank_address;
  // The preflight gate (kiln/sched/preflight_gate.h): nodes pass it before jobs are placed.
  std::string preflight = "quick";
  int64_t preflight_valid_s = 3600;
  preflight::HealthThresholds health;  // preflight's health thresholds (--health-*)
  HealthFlags health_flags;
  // The storage lifecycle (kiln/sched/lifecycle.h).
  // Off by default: deleting what jobs left is the operator's decision, never an upgrade's.
  double retain_days = 0;
  int retain_checkpoints = 0;
  int64_t lifecycle_interval_s = 60;
};

// A pid from the state's settings; 0 (no process) when the text is not one.
pid_t parse_pid(const std::string& text) {
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && ptr == text.data() + text.size() && v > 0 && v < (1 << 30)
             ? static_cast<pid_t>(v)
             : 0;
}

Status write_private(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return os_error(path, "open", errno);
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  close(fd);
  if (!ok) return os_error(path, "write", err);
  return Status();
}

Result<std::string> read_first_line(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::not_found("cannot read " + path);
  std::string line;
  std::getline(in, line);
  if (line.empty()) return Status::invalid_argument(path + " is empty");
  return line;
}

// The token in `path`, made (mode 0600) when the file does not exist yet.
Result<std::string> token_file(const std::string& path) {
  if (access(path.c_str(), F_OK) == 0) return read_first_line(path);
  KILN_ASSIGN_OR_RETURN(std::string token, sched::new_token());
  KILN_RETURN_IF_ERROR(write_private(path, token + "\n"));
  return token;
}

struct Auth {
  sched::TokenRegistry registry;
  std::string node_token;
  std::string admin_token_path;  // the local default's admin token, for clients on this host
};

Result<Auth> load_auth(const ServeFlags& flags) {
  Auth out;
  if (!flags.auth_file.empty()) {
    KILN_ASSIGN_OR_RETURN(out.registry, sched::TokenRegistry::load_file(flags.auth_file));
    if (flags.node_token_file.empty()) {
      return Status::invalid_argument(
          "--auth-file needs --node-token-file: the node agents' token");
    }
    KILN_ASSIGN_OR_RETURN(out.node_token, read_first_line(flags.node_token_file));
    if (!out.registry.is_node_token(out.node_token)) {
      return Status::invalid_argument("the token in " + flags.node_token_file +
                                      " is not the node token of " + flags.auth_file);
    }
    return out;
  }
  // The local default: an admin token and a node token made once per state dir.
  out.admin_token_path = flags.state_dir + "/admin.token";
  KILN_ASSIGN_OR_RETURN(std::string admin, token_file(out.admin_token_path));
  KILN_ASSIGN_OR_RETURN(out.node_token, token_file(flags.state_dir + "/node.token"));
  sched::TokenEntry entry{"admin", "admin", true, sched::sha256_hex(admin)};
  const std::string path = flags.state_dir + "/auth.yaml";
  KILN_RETURN_IF_ERROR(write_private(
      path, sched::TokenRegistry::render({entry}, sched::sha256_hex(out.node_token), {})));
  KILN_ASSIGN_OR_RETURN(out.registry, sched::TokenRegistry::load_file(path));
  return out;
}

// The store daemon of this state dir: adopted when it still runs, else started.
Result<std::string> ensure_store(const ServeFlags& flags, sched::StateStore* state,
                                 const std::string& token_path, Logger& log) {
  const std::string kiln = self_executable();
  KILN_ASSIGN_OR_RETURN(std::optional<std::string> pid_text, state->get_setting("store_pid"));
  KILN_ASSIGN_OR_RETURN(std::optional<std::string> address, state->get_setting("store_address"));
  if (pid_text && address && sched::daemon_alive(parse_pid(*pid_text), {"store", token_path})) {
    log.info("adopted the store daemon", {{"pid", *pid_text}, {"address", *address}});
    return *address;
  }
  const std::string out = flags.state_dir + "/store.out";
  (void)unlink(out.c_str());
  // The ranks reach the store where they reach the API: on this host by default; at --bind's
  // address when the nodes are elsewhere (Slurm nodes in other network namespaces or hosts).
  const std::string store_bind = flags.bind == "0.0.0.0" ? "127.0.0.1" : flags.bind;
  KILN_ASSIGN_OR_RETURN(
      pid_t pid,
      sched::spawn_detached({{kiln, "--log-file", flags.state_dir + "/store.log", "store", "--port",
                              "0", "--bind", store_bind, "--token-file", token_path, "--json"},
                             out,
                             {}}));
  KILN_ASSIGN_OR_RETURN(std::string line, sched::wait_for_json_line(out, "port", kDaemonStartMs));
  const std::string addr =
      store_bind + ":" + std::to_string(nlohmann::json::parse(line)["port"].get<int>());
  KILN_RETURN_IF_ERROR(state->put_setting("store_pid", std::to_string(pid)));
  KILN_RETURN_IF_ERROR(state->put_setting("store_address", addr));
  log.info("started the store daemon", {{"pid", pid}, {"address", addr}});
  return addr;
}

// The embedded cluster's agents: local-0..N-1, two per rack; adopted when they still run.
Result<std::vector<pid_t>> ensure_local_agents(const ServeFlags& flags, sched::StateStore* state,
                                               const std::string& url, Logger& log) {
  const std::string node_token_path =
      flags.node_token_file.empty() ? flags.state_dir + "/node.token" : flags.node_token_file;
  // Over TLS the agents trust the coordinator's certificate (its own CA for a self-signed one).
  std::vector<std::pair<std::string, std::string>> agent_env;
  if (!flags.tls_cert.empty()) agent_env.emplace_back("KILN_CA_CERT", flags.tls_cert);
  std::vector<pid_t> pids;
  const std::string kiln = self_executable();
  for (int i = 0; i < flags.local_nodes; ++i) {
    const std::string name = "local-" + std::to_string(i);
    const std::string dir = flags.state_dir + "/nodes/" + name;
    KILN_RETURN_IF_ERROR(make_dirs_durably(posix_file_system(), dir));
    const std::string key = "agent_pid/" + name;
    KILN_ASSIGN_OR_RETURN(std::optional<std::string> pid_text, state->get_setting(key));
    if (pid_text) {
      const pid_t pid = parse_pid(*pid_text);
      if (sched::daemon_alive(pid, {"agent", "--join", dir})) {
        log.info("adopted a local agent", {{"node", name}, {"pid", pid}});
        pids.push_back(pid);
        continue;
      }
    }
    const std::string labels =
        "rack=r" + std::to_string(i / 2) + ",switch=s" + std::to_string(i / 2);
    KILN_ASSIGN_OR_RETURN(
        pid_t pid,
        sched::spawn_detached(
            {{kiln,
              "--log-file",
              dir + "/agent.log",
              "agent",
              "--join",
              url,
              "--node-name",
              name,
              "--rank-address",
              "127.0.0.1",
              "--labels",
              labels,
              "--slots",
              std::to_string(flags.slots_per_node),
              "--work-dir",
              dir,
              "--node-token-file",
              node_token_path,
              "--keep-logs",
              std::to_string(static_cast<int64_t>(flags.retain_days * 24 * 3600 * 1000)) + "ms"},
             dir + "/agent.out",
             agent_env}));
    KILN_RETURN_IF_ERROR(state->put_setting(key, std::to_string(pid)));
    log.info("started a local agent", {{"node", name}, {"pid", pid}, {"labels", labels}});
    pids.push_back(pid);
  }
  return pids;
}

void raise_fd_limit(int connections) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  const rlim_t want = std::min<rlim_t>(r.rlim_max, static_cast<rlim_t>(connections) + 256);
  if (r.rlim_cur < want) {
    r.rlim_cur = want;
    (void)setrlimit(RLIMIT_NOFILE, &r);
  }
}

int run_serve(ServeFlags flags, const GlobalOptions& globals) {
  TerminationSignals signals;  // first: every thread must inherit the blocked mask
  std::shared_ptr<LogSink> sink = open_log_sink(globals);
  if (!sink) return kExitBadInput;
  Logger log(sink, "serve");
  // Read before anything starts: a bad lock is an error with nothing to clean up.
  std::shared_ptr<const preflight::Lock> lock;
  if (!flags.lock_path.empty()) {
    Result<preflight::Lock> read = preflight::load_lock(flags.lock_path);
    if (!read.ok()) return report_error("serve", read.status().with_context("--lock"));
    lock = std::make_shared<const preflight::Lock>(std::move(*read));
  }
  if (flags.state_dir.empty()) flags.state_dir = default_state_dir();
  if (flags.state_dir[0] != '/') {
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd)) != nullptr)
      flags.state_dir = std::string(cwd) + "/" + flags.state_dir;
  }
  Status s = make_dirs_durably(posix_file_system(), flags.state_dir);
  if (!s.ok()) return report_error("serve", s.with_context("--state-dir"));
  (void)chmod(flags.state_dir.c_str(), 0700);

  Result<sched::SecretBox> box = sched::SecretBox::open_key_file(flags.state_dir + "/secret.key");
  if (!box.ok()) return report_error("serve", box.status());
  Result<std::unique_ptr<sched::StateStore>> state =
      sched::StateStore::open(flags.state_dir + "/kiln.db", &*box);
  if (!state.ok()) return report_error("serve", state.status());
  if (flags.tls_cert.empty() != flags.tls_key.empty()) {
    return report_error("serve", Status::invalid_argument("--tls-cert and --tls-key go together"));
  }
  for (std::string* path : {&flags.tls_cert, &flags.tls_key}) {
    char resolved[4096];
    if (!path->empty() && realpath(path->c_str(), resolved) != nullptr) *path = resolved;
  }
  Result<Auth> auth = load_auth(flags);
  if (!auth.ok()) return report_error("serve", auth.status());

  if (flags.port < 0) {
    Result<std::optional<std::string>> previous = (*state)->get_setting("port");
    int previous_port = 0;
    if (previous.ok() && *previous) {
      const std::string& text = **previous;
      std::from_chars(text.data(), text.data() + text.size(), previous_port);
    }
    flags.port = previous_port > 0 && previous_port < 65536 ? previous_port : kDefaultPort;
  }
  const std::string store_token_path = flags.state_dir + "/store.token";
  Result<std::string> store_token = token_file(store_token_path);
  if (!store_token.ok()) return report_error("serve", store_token.status());
  Result<std::string> store_address = ensure_store(flags, state->get(), store_token_path, log);
  if (!store_address.ok()) return report_error("serve", store_address.status());

  sched::CoordinatorOptions options;
  options.store_address = *store_address;
  options.store_token = *store_token;
  options.kiln_binary = self_executable();
  options.node_timeout_ms = flags.node_timeout_ms;
  options.cordon_faults = flags.cordon_faults;
  options.cordon_window_ms = flags.cordon_window_s * 1000;
  options.team_users = auth->registry.team_users();
  options.preempt_grace_ms = flags.preempt_grace_s * 1000;
  options.executor = flags.executor;
  options.manager_places = flags.executor == "slurm" && flags.slurm_placement == "slurm";
  // Under Slurm the agents live only inside allocations: its HealthCheckProgram runs
  // `kiln-node-check` instead (deploy/slurm/), and the gate stays off.
  options.preflight_level =
      flags.preflight == "off" || flags.executor != "local" ? "" : flags.preflight;
  options.preflight_valid_ms = flags.preflight_valid_s * 1000;
  if (flags.executor == "slurm" && flags.local_nodes > 0) {
    return report_error(
        "serve", Status::invalid_argument("--local-nodes and --executor slurm exclude each other: "
                                          "under Slurm the nodes are Slurm's"));
  }
  if (!flags.queues_file.empty()) {
    Result<std::vector<sched::QueueSpec>> queues = sched::load_queue_config(flags.queues_file);
    if (!queues.ok()) return report_error("serve", queues.status());
    options.queues = std::move(*queues);
  }
  sched::KilnPolicyOptions policy;
  policy.preempt_min_runtime_s = static_cast<double>(flags.preempt_min_runtime_s);
  Result<std::unique_ptr<sched::Coordinator>> coordinator = sched::Coordinator::open(
      options, state->get(), sched::make_kiln_policy(policy), &system_clock(), log);
  if (!coordinator.ok()) return report_error("serve", coordinator.status());
  // Before the server: its routes use the gate, so the gate outlives them.
  sched::PreflightGateOptions gate_options;
  gate_options.node_token = auth->node_token;
  gate_options.lock = lock;
  gate_options.thresholds = flags.health;
  // The embedded cluster's nodes share this host: its load is theirs, not a stranger's.
  if (flags.local_nodes > 0 && flags.health_flags.load->count() == 0) {
    gate_options.thresholds.load_per_cpu_max = 0;
  }
  gate_options.store_address = *store_address;
  gate_options.store_token = *store_token;
  if (!options.preflight_level.empty()) gate_options.level = options.preflight_level;
  sched::PreflightGate gate(gate_options, coordinator->get(), Logger(sink, "preflight"));

  raise_fd_limit(flags.connections_max);
  obs::MetricsRegistry registry;
  sched::LifecycleOptions lifecycle_options;
  lifecycle_options.keep_finished_ms = static_cast<int64_t>(flags.retain_days * 24 * 3600 * 1000);
  lifecycle_options.keep_checkpoints = flags.retain_checkpoints;
  sched::Lifecycle lifecycle(lifecycle_options, state->get(), &system_clock(), log);
  ServeMetrics metrics(&registry, coordinator->get(), state->get(), &lifecycle);
  obs::HttpServerOptions http;
  http.bind_address = flags.bind;
  http.port = flags.port;
  http.threads = 8;
  http.connections_max = flags.connections_max;
  http.idle_timeout_ms = 30000;
  http.tls_cert_path = flags.tls_cert;
  http.tls_key_path = flags.tls_key;
  obs::HttpServer server(http);
  obs::add_metrics_routes(&server, &registry, nullptr);
  sched::ApiContext api;
  api.coordinator = coordinator->get();
  api.tokens = &auth->registry;
  api.audit = state->get();
  api.node_token = auth->node_token;
  api.preflight = &gate;
  api.log = log;
  api.lifecycle = &lifecycle;
  sched::add_api_routes(&server, api);
  sched::add_ui_routes(&server);
  s = server.start();
  if (!s.ok()) return report_error("serve", s.with_context("--port"));
  const std::string url = std::string(flags.tls_cert.empty() ? "http" : "https") + "://" +
                          flags.bind + ":" + std::to_string(server.port());
  (void)(*state)->put_setting("port", std::to_string(server.port()));

  Result<std::vector<pid_t>> agents = ensure_local_agents(flags, state->get(), url, log);
  if (!agents.ok()) return report_error("serve", agents.status());
  std::unique_ptr<sched::SlurmExecutor> slurm;
  if (flags.executor == "slurm") {
    sched::SlurmOptions so;
    so.coordinator_url = url;
    so.kiln_binary = self_executable();
    so.node_token = auth->node_token;
    so.work_dir = flags.state_dir + "/slurm";
    so.partition = flags.slurm_partition;
    so.name_prefix = flags.slurm_prefix;
    so.rank_address = flags.rank_address;
    so.ca_cert = flags.tls_cert;
    slurm = std::make_unique<sched::SlurmExecutor>(so, coordinator->get(), Logger(sink, "slurm"));
    s = slurm->start();
    if (!s.ok()) return report_error("serve", s.with_context("--executor slurm"));
  }
  if (!auth->admin_token_path.empty()) {
    Status written = write_client_discovery(url, auth->admin_token_path, flags.tls_cert);
    if (!written.ok())
      log.warn("client discovery file not written", {{"error", written.to_string()}});
  }
  {
    nlohmann::ordered_json event;
    event["event"] = "serving";
    event["address"] = url;
    event["state_dir"] = flags.state_dir;
    event["token_file"] = auth->admin_token_path;
    event["local_nodes"] = flags.local_nodes;
    event["executor"] = flags.executor;
    if (flags.json) {
      std::cout << event.dump() << std::endl;
    } else {
      std::cout << "kiln serve: coordinator on " << url << " (state in " << flags.state_dir
                << ")\n";
      if (!auth->admin_token_path.empty()) {
        std::cout << "  export KILN_SERVER=" << url << "\n  export KILN_TOKEN=$(cat "
                  << auth->admin_token_path << ")\n";
      }
      std::cout << std::flush;
    }
  }

  if (!options.preflight_level.empty()) gate.start();
  std::atomic<bool> stopping{false};
  std::thread ticker([&] {
    while (!stopping.load()) {
      (*coordinator)->tick();
      metrics.sample();
      std::this_thread::sleep_for(std::chrono::milliseconds(kTickMs));
    }
  });
  // The lifecycle walks and deletes directories: on its own thread, never under the
  // coordinator's lock. Its first pass comes soon after the start (the page's storage figures).
  std::thread janitor([&] {
    int64_t next_ms = 2000;
    while (!stopping.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if ((next_ms -= 200) > 0) continue;
      next_ms = flags.lifecycle_interval_s * 1000;
      Result<sched::LifecyclePass> pass = lifecycle.run_once();
      if (!pass.ok()) log.warn("storage lifecycle", {{"error", pass.status().to_string()}});
    }
  });
  int signal_number = 0;
  while (signal_number == 0)
    signal_number = signals.wait(1000);
  stopping = true;
  ticker.join();
  janitor.join();
  gate.stop();
  // Allocations stay: a coordinator started again finds them by name and follows them.
  if (slurm) slurm->stop();
  server.stop();
  // An orderly stop takes the embedded cluster down with it; SIGKILL would have left it running.
  for (pid_t pid : *agents)
    if (sched::daemon_alive(pid, {"agent", "--join"})) kill(pid, SIGTERM);
  Result<std::optional<std::string>> store_pid = (*state)->get_setting("store_pid");
  if (store_pid.ok() && *store_pid) {
    const pid_t pid = parse_pid(**store_pid);
    // Only our store: a pid the kernel gave to someone else since is left alone.
    if (sched::daemon_alive(pid, {"store", store_token_path})) kill(pid, SIGTERM);
  }
  log.info("coordinator stopped", {{"signal", signal_number}});
  return kExitOk;
}

}  // namespace

Command add_serve_command(CLI::App& parent) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* app = parent.add_subcommand(
      "serve",
      "Run the coordinator: jobs, nodes, faults and restarts (optionally a local cluster)");
  app->add_option("--state-dir", flags->state_dir,
                  "SQLite state, tokens, logs and local nodes' work dirs (default ~/.kiln/serve)");
  app->add_option("--port", flags->port, "API port (default: this state dir's last, else 7470)")
      ->check(CLI::Range(0, 65535));
  app->add_option("--bind", flags->bind, "API address")->capture_default_str();
  app->add_option("--local-nodes", flags->local_nodes, "start this many node agents on this host")
      ->check(CLI::Range(0, 64));
  app->add_option("--slots-per-node", flags->slots_per_node, "ranks each local node can run")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app->add_option("--auth-file", flags->auth_file, "token hashes, teams and users (YAML)")
      ->check(CLI::ExistingFile);
  app->add_option("--node-token-file", flags->node_token_file, "the node agents' token")
      ->check(CLI::ExistingFile);
  app->add_option("--queues", flags->queues_file,
                  "queues, quotas, cohorts and fair-share weights (YAML; "
                  "include/kiln/sched/queue_config.h)");
  app->add_option("--preempt-grace-s", flags->preempt_grace_s,
                  "seconds a preempted job has to checkpoint and exit before SIGKILL")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{3600}));
  app->add_option("--preempt-min-runtime-s", flags->preempt_min_runtime_s,
                  "a job is not preempted within this long of its start (nor of its time limit)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{86400}));
  app->add_option("--node-timeout-ms", flags->node_timeout_ms,
                  "a node whose agent is silent this long is down")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{200}, int64_t{3600000}));
  app->add_option("--cordon-after", flags->cordon_faults,
                  "faults on one node within the window that cordon it")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app->add_option("--cordon-window-s", flags->cordon_window_s, "the window, in seconds")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{86400 * 30}));
  app->add_option("--connections-max", flags->connections_max, "open API connections at most")
      ->capture_default_str()
      ->check(CLI::Range(16, 1 << 20));
  app->add_option("--tls-cert", flags->tls_cert,
                  "serve the API over TLS with this certificate (PEM)")
      ->check(CLI::ExistingFile);
  app->add_option("--tls-key", flags->tls_key, "the certificate's private key (PEM)")
      ->check(CLI::ExistingFile);
  app->add_option("--executor", flags->executor,
                  "who owns the nodes: local (agents that join) or slurm (docs/slurm.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"local", "slurm"}));
  app->add_option("--slurm-partition", flags->slurm_partition,
                  "with --executor slurm: the partition Kiln's jobs run in (default: Slurm's)");
  app->add_option("--slurm-placement", flags->slurm_placement,
                  "with --executor slurm: who picks a job's nodes: kiln (its policy, --nodelist) "
                  "or slurm (Slurm's own placement, --exclude of the nodes Kiln will not use)")
      ->capture_default_str()
      ->check(CLI::IsMember({"kiln", "slurm"}));
  app->add_option("--slurm-prefix", flags->slurm_prefix,
                  "with --executor slurm: the name prefix of this coordinator's allocations")
      ->capture_default_str();
  app->add_option("--rank-address", flags->rank_address,
                  "with --executor slurm: the address (or interface) ranks advertise for TCP");
  app->add_option("--lock", flags->lock_path,
                  "the version lock (kiln lock) preflight checks nodes against");
  app->add_option("--preflight", flags->preflight,
                  "the level nodes pass before jobs are placed on them (docs/preflight.md); "
                  "off places on any ready node")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "quick", "full"}));
  app->add_option("--preflight-valid-s", flags->preflight_valid_s,
                  "a node's preflight pass holds this long")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{10}, int64_t{86400 * 30}));
  app->add_option("--retain-days", flags->retain_days,
                  "a finished job's checkpoints, curves and rank logs are removed this many days "
                  "after it ended (0: kept)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 365.0));
  app->add_option("--retain-checkpoints", flags->retain_checkpoints,
                  "a finished job keeps its newest K checkpoints until then (0: all)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  app->add_option("--lifecycle-interval-s", flags->lifecycle_interval_s,
                  "how often finished jobs' storage is looked at and measured")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  // Preflight's health thresholds, per cluster: a node below one is cordoned by the gate.
  flags->health_flags = add_health_flags(app, &flags->health);
  app->add_flag("--json", flags->json, "print the serving line as JSON");
  return {app, [flags](const GlobalOptions& globals) { return run_serve(*flags, globals); }};
}

}  // namespace kiln::cli
