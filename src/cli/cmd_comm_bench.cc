// `kiln comm-bench`: benchmark a collective across N local ranks (child processes it starts),
// checking the result of every op. One line per size; with --json one JSON object per line:
//   {"op","bytes","ranks","transport","dtype","in_place","iters","time_us","algbw_GBps",
//    "busbw_GBps","correct"}
// When a rank dies or an op fails, it exits non-zero and says which rank failed.
//
// The same subcommand with --worker is what each rank runs (the launcher adds it).
#include <kiln/comm/bench.h>
#include <kiln/comm/communicator.h>
#include <kiln/comm/store.h>
#include <kiln/launch/local_launcher.h>
#include <kiln/launch/rank_env.h>

#include <cstdio>
#include <iostream>

#include "cli/command.h"
#include "cli/rank_launch.h"
#include "cli/signals.h"

namespace kiln::cli {
namespace {

struct CommBenchFlags {
  std::string op = "allreduce";
  int ranks = 2;
  std::string transport = "shm";
  std::string min_bytes = "8";
  std::string max_bytes = "64M";
  int iters = 20;
  int warmup = 5;
  std::string dtype = "f32";
  std::string reduce = "sum";
  bool in_place = false;
  std::string check_bytes_max = "256M";
  int64_t timeout_ms = 30'000;
  int hosts = 0;  // fake hosts (0: all ranks on this host)
  std::string algorithm = "auto";
  int tcp_connections = 1;
  std::string iface;
  std::string flight_recorder_dir;
  bool json = false;
  bool worker = false;
  std::string cpu_bind = "cores";
};

Result<comm::OpKind> parse_op(const std::string& name) {
  for (int k = 0; k <= static_cast<int>(comm::OpKind::kRecv); ++k) {
    const auto kind = static_cast<comm::OpKind>(k);
    if (comm::op_kind_name(kind) == name) return kind;
  }
  return Status::invalid_argument("--op: unknown op '" + name + "'");
}

// The benchmark's options from the flags, each error naming its flag; validated the same way
// run_comm_bench does. The launcher calls it before it starts any rank, so a typo is one
// message and exit 2, not one message per rank after all of them started.
Result<comm::BenchOptions> bench_options(const CommBenchFlags& f) {
  comm::BenchOptions b;
  KILN_ASSIGN_OR_RETURN(b.op, parse_op(f.op));
  Result<comm::DataType> dtype = comm::parse_dtype(f.dtype);
  if (!dtype.ok()) return dtype.status().with_context("--dtype");
  Result<comm::ReduceOp> reduce = comm::parse_reduce_op(f.reduce);
  if (!reduce.ok()) return reduce.status().with_context("--reduce");
  Result<size_t> min_bytes = parse_bytes(f.min_bytes);
  if (!min_bytes.ok()) return min_bytes.status().with_context("--min-bytes");
  Result<size_t> max_bytes = parse_bytes(f.max_bytes);
  if (!max_bytes.ok()) return max_bytes.status().with_context("--max-bytes");
  Result<size_t> check_bytes_max = parse_bytes(f.check_bytes_max);
  if (!check_bytes_max.ok()) return check_bytes_max.status().with_context("--check-bytes-max");
  Result<comm::Algorithm> algorithm = comm::parse_algorithm(f.algorithm);
  if (!algorithm.ok()) return algorithm.status().with_context("--algorithm");
  b.dtype = *dtype;
  b.reduce = *reduce;
  b.min_bytes = *min_bytes;
  b.max_bytes = *max_bytes;
  b.check_bytes_max = *check_bytes_max;
  b.iters = f.iters;
  b.warmup = f.warmup;
  b.in_place = f.in_place;
  b.transport_name = f.transport;
  KILN_RETURN_IF_ERROR(comm::validate_bench_options(b));
  return b;
}

void print_row(const comm::BenchRow& row, bool json) {
  if (json) {
    std::cout << comm::bench_row_json(row) << std::endl;
    return;
  }
  char line[160];
  std::snprintf(line, sizeof(line), "%12zu %12.2f %10.3f %10.3f  %s", row.bytes, row.time_us,
                row.algbw_GBps, row.busbw_GBps, row.correct ? "ok" : "WRONG");
  std::cout << line << std::endl;
}

int run_worker(const CommBenchFlags& f, const GlobalOptions& g) {
  // Before any thread: SIGUSR1 must stay blocked in all of them.
  SignalThread dump_signal({SIGUSR1});
  std::shared_ptr<LogSink> sink = open_log_sink(g);
  if (!sink) return kExitBadInput;
  Result<launch::RankEnv> contract = launch::rank_env_from_process();
  if (!contract.ok()) return report_error("comm-bench", contract.status());
  const comm::RankEnvironment* env = &contract->identity;
  Logger log(sink, "comm-bench.rank" + std::to_string(env->rank));
  comm::StoreClientOptions store_options;
  store_options.address = env->store_address;
  store_options.token = env->job_token;
  Result<std::unique_ptr<comm::Store>> store = comm::connect_tcp_store(store_options);
  if (!store.ok()) return report_error("comm-bench", store.status());

  comm::CommOptions o;
  o.rank = env->rank;
  o.world_size = env->world_size;
  o.host = env->host;
  o.topology = env->topology;
  o.transport = f.transport == "tcp" ? comm::TransportPolicy::kTcp : comm::TransportPolicy::kAuto;
  o.timeout_ms = f.timeout_ms;
  o.job_token = env->job_token;
  o.store_prefix = contract->job.store_prefix() + "/comm-bench";
  o.tcp_interface = f.iface;
  o.tcp_connections_per_peer = f.tcp_connections;
  o.flight_recorder_dir = f.flight_recorder_dir;
  Result<comm::Algorithm> algorithm = comm::parse_algorithm(f.algorithm);
  if (!algorithm.ok()) return report_error("comm-bench", algorithm.status());
  o.allreduce_algorithm = *algorithm;
  Result<std::unique_ptr<comm::Communicator>> c = comm::Communicator::create(o, store->get(), log);
  if (!c.ok()) return report_error("comm-bench", c.status());
  comm::Communicator& comm = **c;
  dump_signal.start([&comm, &f, &log](int) {
    if (!f.flight_recorder_dir.empty()) {
      Result<std::string> path =
          comm.flight_recorder().dump_to_dir(f.flight_recorder_dir, "SIGUSR1");
      log.warn("flight recorder dumped on SIGUSR1",
               {{"path", path.ok() ? *path : path.status().to_string()}});
    } else {
      std::cerr << comm.flight_recorder().dump_json("SIGUSR1") << std::endl;
    }
  });

  Result<comm::BenchOptions> options = bench_options(f);
  if (!options.ok()) return report_error("comm-bench", options.status());
  const comm::BenchOptions& b = *options;
  const bool printer = env->rank == 0;
  if (printer && !f.json) {
    std::cout << "# " << f.op << " " << f.dtype << " " << f.reduce << ", " << f.ranks << " ranks, "
              << f.transport << (f.in_place ? ", in place" : ", out of place")
              << "\n#        bytes      time_us  algbw_GB/s  busbw_GB/s  check" << std::endl;
  }
  Result<std::vector<comm::BenchRow>> rows =
      comm::run_comm_bench(comm, b, [&](const comm::BenchRow& row) {
        if (printer) print_row(row, f.json);
      });
  if (!rows.ok()) {
    log.error("benchmark failed", {{"error", rows.status().to_string()}});
    return report_error("comm-bench rank " + std::to_string(env->rank), rows.status());
  }
  for (const comm::BenchRow& row : *rows) {
    if (!row.correct) {
      return report_error("comm-bench", Status::corruption("wrong results at " +
                                                           std::to_string(row.bytes) + " bytes"));
    }
  }
  return kExitOk;
}

int run_launcher(const CommBenchFlags& f, const GlobalOptions& g) {
  Result<comm::BenchOptions> options = bench_options(f);
  if (!options.ok()) return report_error("comm-bench", options.status());
  // Before any thread: the launcher forwards these to its ranks.
  SignalThread signals({SIGINT, SIGTERM, SIGUSR1});
  std::shared_ptr<LogSink> sink = open_log_sink(g);
  if (!sink) return kExitBadInput;
  Logger log(sink, "comm-bench");
  launch::LaunchOptions launch;
  launch.world_size = f.ranks;
  launch.argv = rank_command_line(g, {"--worker"});
  for (int h = 0; h < f.hosts; ++h)
    launch.hosts.push_back("host" + std::to_string(h));
  launch.grace_ms = std::min<int64_t>(f.timeout_ms, 5'000);
  Result<launch::CpuBind> bind = launch::CpuBind::parse(f.cpu_bind);
  if (!bind.ok()) return report_error("comm-bench", bind.status());
  launch.cpu_bind = *bind;  // one thread per rank: the one calling the collectives
  Status s = job_from_environment(&launch);
  if (!s.ok()) return report_error("comm-bench", s);
  // Generous: a sweep to 64 MiB with many iterations takes a while on two cores.
  constexpr int64_t kJobTimeoutMs = 3'600'000;
  return run_local_job("comm-bench", launch, log, kJobTimeoutMs, &signals);
}

}  // namespace

Command add_comm_bench_command(CLI::App& parent) {
  auto f = std::make_shared<CommBenchFlags>();
  CLI::App* app = parent.add_subcommand(
      "comm-bench", "Benchmark a collective across N local ranks, checking every result");
  app->add_option("--op", f->op,
                  "allreduce, reduce_scatter, allgather, broadcast, reduce, all_to_all")
      ->capture_default_str();
  app->add_option("--ranks", f->ranks, "ranks to start")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app->add_option("--transport", f->transport, "shm (shared memory within a host) or tcp")
      ->check(CLI::IsMember({"shm", "tcp"}))
      ->capture_default_str();
  app->add_option("--min-bytes", f->min_bytes, "smallest size (suffixes K, M, G)")
      ->capture_default_str();
  app->add_option("--max-bytes", f->max_bytes, "largest size; sizes double")->capture_default_str();
  app->add_option("--iters", f->iters, "timed ops per size")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  app->add_option("--warmup", f->warmup, "untimed ops per size first")
      ->check(CLI::Range(0, 1'000'000))
      ->capture_default_str();
  app->add_option("--dtype", f->dtype, "f32, f64, bf16, i32, i64")->capture_default_str();
  app->add_option("--reduce", f->reduce, "sum, min, max, avg")->capture_default_str();
  app->add_flag("--in-place", f->in_place, "result overwrites the input");
  app->add_option("--check-bytes-max", f->check_bytes_max,
                  "memory for the output buffers of one checked batch (each timed op gets its "
                  "own); as small as one op's buffers reuses them, cache-hot")
      ->capture_default_str();
  app->add_option("--timeout-ms", f->timeout_ms, "deadline of every op")
      ->check(CLI::Range(int64_t{1}, int64_t{86'400'000}))
      ->capture_default_str();
  app->add_option("--hosts", f->hosts, "spread ranks over this many fake hosts (TCP between them)")
      ->check(CLI::Range(0, 1024));
  app->add_option("--algorithm", f->algorithm, "allreduce: auto, ring, rd, hier")
      ->capture_default_str();
  app->add_option("--tcp-connections", f->tcp_connections, "TCP connections per peer")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  app->add_option("--iface", f->iface, "TCP interface name or address");
  app->add_option("--cpu-bind", f->cpu_bind,
                  "bind each rank to its own cores (cores), leave them to the OS (none), or give "
                  "rank r list r mod N (list:0/1)")
      ->capture_default_str();
  app->add_option("--flight-recorder-dir", f->flight_recorder_dir,
                  "dump flight recorders here on failure or SIGUSR1");
  app->add_flag("--json", f->json, "one JSON object per line");
  app->add_flag("--worker", f->worker, "run as one rank (the launcher adds this)")
      ->group("");  // hidden from --help
  return {app, [f](const GlobalOptions& g) {
            return f->worker ? run_worker(*f, g) : run_launcher(*f, g);
          }};
}

}  // namespace kiln::cli
