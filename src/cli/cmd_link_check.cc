// `kiln link-check`: one node's part of the link check of `kiln preflight --level full`
// (kiln/preflight/link_probe.h). A node agent starts it, one rank per node, with the rank
// environment (docs/launch.md) and KILN_COMM_ADDR; it talks TCP only, even between ranks that
// share a host. Prints one JSON line per pair this rank leads,
//   {"a": 0, "b": 1, "gbps": 9.4, "latency_us": 31.0}
// then {"done": true, "rank": R, "pairs": K}. Exits 1 when a link fails (the error names the
// peer), 2 on bad flags or environment. `--plan N` prints the plan's size for N nodes instead
// ({"nodes", "rounds", "pairs", "all_pairs"}; bench/preflight/run's cost model).
#include <iostream>

#include <nlohmann/json.hpp>

#include <kiln/comm/communicator.h>
#include <kiln/comm/store.h>
#include <kiln/launch/rank_env.h>
#include <kiln/preflight/link_probe.h>

#include "cli/command.h"

namespace kiln::cli {
namespace {

struct LinkCheckFlags {
  int random_rounds = 1;
  uint64_t seed = 1;
  std::string bytes = "4M";
  int iters = 3;
  int64_t timeout_ms = 20'000;
  int plan = 0;  // > 0: print the plan's cost for this many nodes and exit
};

int run_link_check(const LinkCheckFlags& f, const GlobalOptions& g) {
  std::shared_ptr<LogSink> sink = open_log_sink(g);
  if (!sink) return kExitBadInput;
  if (f.plan > 0) {
    const preflight::LinkCheckCost c = preflight::link_check_cost(f.plan, f.random_rounds, 1.0);
    std::cout << nlohmann::json{{"nodes", f.plan},
                                {"rounds", c.rounds},
                                {"pairs", c.pairs},
                                {"all_pairs", c.all_pairs}}
                     .dump()
              << std::endl;
    return kExitOk;
  }
  Result<size_t> bytes = parse_bytes(f.bytes);
  if (!bytes.ok() || *bytes == 0 || *bytes > (size_t{256} << 20)) {
    return report_error("link-check",
                        Status::invalid_argument("--bytes '" + f.bytes + "': 1 byte to 256M"));
  }
  Result<launch::RankEnv> contract = launch::rank_env_from_process();
  if (!contract.ok()) return report_error("link-check", contract.status());
  const comm::RankEnvironment& env = contract->identity;
  Logger log(sink, "link-check.rank" + std::to_string(env.rank));
  comm::StoreClientOptions store_options;
  store_options.address = env.store_address;
  store_options.token = env.job_token;
  Result<std::unique_ptr<comm::Store>> store = comm::connect_tcp_store(store_options);
  if (!store.ok()) return report_error("link-check", store.status());
  comm::CommOptions o;
  o.rank = env.rank;
  o.world_size = env.world_size;
  o.host = env.host;
  o.transport = comm::TransportPolicy::kTcp;  // the links are the point, even on one host
  o.timeout_ms = f.timeout_ms;
  o.setup_timeout_ms = f.timeout_ms;
  o.job_token = env.job_token;
  o.store_prefix = contract->job.store_prefix() + "/link-check";
  Result<std::unique_ptr<comm::Communicator>> c = comm::Communicator::create(o, store->get(), log);
  if (!c.ok()) return report_error("link-check", c.status());
  preflight::LinkProbeOptions probe;
  probe.random_rounds = f.random_rounds;
  probe.seed = f.seed;
  probe.bytes = *bytes;
  probe.iters = f.iters;
  Result<std::vector<preflight::LinkMeasurement>> measured = preflight::run_link_probe(**c, probe);
  if (!measured.ok()) {
    std::cerr << "kiln link-check: rank " << env.rank << ": " << measured.status().to_string()
              << std::endl;
    return kExitFailure;
  }
  for (const preflight::LinkMeasurement& m : *measured) {
    std::cout << nlohmann::json{{"a", m.a},
                                {"b", m.b},
                                {"gbps", m.gbps},
                                {"latency_us", m.latency_us}}
                     .dump()
              << "\n";
  }
  std::cout
      << nlohmann::json{{"done", true}, {"rank", env.rank}, {"pairs", measured->size()}}.dump()
      << std::endl;
  return kExitOk;
}

}  // namespace

Command add_link_check_command(CLI::App& parent) {
  auto f = std::make_shared<LinkCheckFlags>();
  CLI::App* app = parent.add_subcommand(
      "link-check",
      "One node's part of preflight's link check (run by node agents, one rank per node)");
  app->add_option("--random-rounds", f->random_rounds, "rounds of random pairs after the ring")
      ->capture_default_str()
      ->check(CLI::Range(0, 16));
  app->add_option("--seed", f->seed, "the random pairs' seed (the same on every node)")
      ->capture_default_str();
  app->add_option("--bytes", f->bytes, "bytes each way per measurement")->capture_default_str();
  app->add_option("--iters", f->iters, "measurements per direction (the best counts)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app->add_option("--timeout-ms", f->timeout_ms, "deadline of setup and of every send")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{600'000}));
  app->add_option("--plan", f->plan,
                  "print the rounds and pairs of the check on this many nodes, and exit")
      ->check(CLI::Range(2, 100000));
  return {app, [f](const GlobalOptions& g) { return run_link_check(*f, g); }};
}

}  // namespace kiln::cli
