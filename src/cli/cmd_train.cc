// `kiln train CONFIG.yaml [--max-steps N] [--batch B] [--seq T] [--threads T] [--seed S]
//  [--grad-accum K] [--val-every N] [--metrics-port P] [--metrics-bind ADDR] [--export FILE]
//  [--debug-dump DIR] [--debug-nan-step N] [--peak-gflops X] [--nproc N] [--zero 0|1] [--ckpt-dir
//  D] [--ckpt-every N]
//  [--ckpt-keep K] [--comm-timeout-ms MS] [--json]`: trains GPT-2 as the config says (see
// include/kiln/train/train_config.h and trainer.h). Flags override the config's keys and are
// checked against the same rules; a bad config or flag exits 2 naming the file:line:key or flag.
//
// Data parallelism: `--nproc N` starts N ranks of this command on this host with an embedded
// rendezvous store (kiln_launch's LocalJob) and waits for them; a rank that fails makes the others
// stop within the communicator's timeout, and the launcher names the rank that failed first. A
// process started by a launcher (KILN_RANK or Slurm's SLURM_PROCID in its environment, world size
// above 1) is a rank: it connects to the store, builds its communicator and trains its slice,
// every store key under its job and attempt (include/kiln/launch/rank_env.h).
//
// Signals, taken on a signal thread (no handler runs in signal context): SIGTERM or SIGINT asks
// the run to stop: it finishes the step in progress (all ranks agree on which), checkpoints it
// (with --ckpt-dir), waits until that is durable and exits kExitStoppedResumable (75); SIGUSR1
// logs the rank's flight recorder and training goes on. The launcher forwards all three to its
// ranks and exits 75 when they all stopped.
//
// Output: with --json one JSON line per step and a final {"event":"done",...} line; otherwise
// the progress line, live when stdout is a terminal. Logs go to stderr (or --log-file).
//
// Under a node agent (include/kiln/sched/rank_process.h), two more variables:
//   KILN_PROGRESS_FD          a pipe's write end: one JSON line per step for the agent
//                             (TrainerOptions::progress_fd). The rank then ignores SIGPIPE: an
//                             agent that restarts takes its pipes' read ends with it, and the
//                             rank must keep training rather than die at its next line.
//   KILN_FLIGHT_RECORDER_DIR  where a failed collective (and SIGUSR1) dumps this rank's flight
//                             recorder as flight-rank<R>.json (CommOptions::flight_recorder_dir).
#include <kiln/base/config.h>
#include <kiln/base/cpu_set.h>
#include <kiln/comm/communicator.h>
#include <kiln/comm/store.h>
#include <kiln/launch/local_launcher.h>
#include <kiln/launch/rank_env.h>
#include <kiln/obs/http_server.h>
#include <kiln/obs/metrics.h>
#include <kiln/obs/metrics_endpoint.h>
#include <kiln/sched/auth.h>
#include <kiln/train/train_config.h>
#include <kiln/train/trainer.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>

#include "cli/command.h"
#include "cli/rank_launch.h"
#include "cli/signals.h"

namespace kiln::cli {
namespace {

struct TrainFlags {
  std::string config_path;
  int max_steps = 0, batch = 0, seq = 0, threads = 0, grad_accum = 0, val_every = 0;
  uint64_t seed = 0;
  // Set once parsing registered the option; count() says whether it was given.
  CLI::Option *max_steps_opt = nullptr, *batch_opt = nullptr, *seq_opt = nullptr,
              *threads_opt = nullptr, *seed_opt = nullptr, *grad_accum_opt = nullptr,
              *val_every_opt = nullptr;
  int metrics_port = -1;  // -1: no metrics endpoint
  std::string metrics_bind = "127.0.0.1";
  std::string export_path;
  std::string debug_dump_dir;
  int debug_nan_step = 0;
  double peak_gflops = 0;
  bool json = false;
  int nproc = 1;
  int zero = 0;
  CLI::Option* zero_opt = nullptr;
  std::string precision;
  CLI::Option* precision_opt = nullptr;
  std::string grad_reduce;
  CLI::Option* grad_reduce_opt = nullptr;
  std::string ckpt_dir;
  int ckpt_every = 0;
  int ckpt_keep = 3;
  int64_t comm_timeout_ms = 30'000;
  int stop_after_step = 0;
  std::string cpu_bind = "cores";
};

// This process is a rank of a multi-process job when a launcher gave it an identity.
bool launched_as_rank() {
  return std::getenv("KILN_RANK") != nullptr || std::getenv("SLURM_PROCID") != nullptr;
}

// The agent's progress pipe from KILN_PROGRESS_FD: -1 when unset or empty, else an open
// descriptor; kInvalidArgument naming the variable for anything else.
Result<int> progress_fd_from_env() {
  const char* value = std::getenv("KILN_PROGRESS_FD");
  if (value == nullptr || *value == '\0') return -1;
  const std::string_view text(value);
  int fd = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), fd);
  if (ec != std::errc() || end != text.data() + text.size() || fd < 0) {
    return Status::invalid_argument("KILN_PROGRESS_FD must be a file descriptor number, not '" +
                                    std::string(text) + "'");
  }
  if (fcntl(fd, F_GETFD) < 0) {
    return Status::invalid_argument("KILN_PROGRESS_FD=" + std::string(text) + ": descriptor " +
                                    std::to_string(fd) + " is not open");
  }
  return fd;
}

// KILN_FLIGHT_RECORDER_DIR, or empty.
std::string flight_recorder_dir_from_env() {
  const char* value = std::getenv("KILN_FLIGHT_RECORDER_DIR");
  return value != nullptr ? std::string(value) : std::string();
}

train::TrainOverrides overrides_of(const TrainFlags& f);

int run_launcher(const TrainFlags& f, const GlobalOptions& g, SignalThread* signals) {
  std::shared_ptr<LogSink> sink = open_log_sink(g);
  if (!sink) return kExitBadInput;
  Logger log(sink, "train");
  if (!f.debug_dump_dir.empty()) {
    return report_error("train", Status::invalid_argument("--debug-dump needs --nproc 1"));
  }
  // The launcher reads the config too: a bad one is reported once, not once per rank, and the
  // ranks' compute threads are what placement gives each rank cores for.
  Result<train::TrainConfig> config = train::load_train_config(f.config_path);
  if (!config.ok()) return report_error("train", config.status());
  Status overridden = train::apply_overrides(overrides_of(f), &*config);
  if (!overridden.ok()) return report_error("train", overridden);
  launch::LaunchOptions launch;
  launch.world_size = f.nproc;
  launch.argv = rank_command_line(g);
  Result<launch::CpuBind> bind = launch::CpuBind::parse(f.cpu_bind);
  if (!bind.ok()) return report_error("train", bind.status());
  launch.cpu_bind = *bind;
  launch.threads_per_rank = config->train.threads;
  // The others must notice a failed rank (a collective's timeout) or finish a stop's checkpoint.
  launch.grace_ms = f.comm_timeout_ms + 5'000;
  Status s = job_from_environment(&launch);
  if (!s.ok()) return report_error("train", s);
  // A training run has no natural bound; a week is beyond any run on this machine.
  constexpr int64_t kJobTimeoutMs = 7LL * 24 * 3600 * 1000;
  return run_local_job("train", launch, log, kJobTimeoutMs, signals);
}

train::TrainOverrides overrides_of(const TrainFlags& f) {
  train::TrainOverrides o;
  if (f.max_steps_opt->count() > 0) o.max_steps = f.max_steps;
  if (f.batch_opt->count() > 0) o.batch = f.batch;
  if (f.seq_opt->count() > 0) o.seq = f.seq;
  if (f.threads_opt->count() > 0) o.threads = f.threads;
  if (f.seed_opt->count() > 0) o.seed = f.seed;
  if (f.grad_accum_opt->count() > 0) o.grad_accum = f.grad_accum;
  if (f.val_every_opt->count() > 0) o.val_every = f.val_every;
  if (f.zero_opt->count() > 0) o.zero = f.zero;
  if (f.precision_opt->count() > 0) o.precision = f.precision;
  if (f.grad_reduce_opt->count() > 0) o.grad_reduce = f.grad_reduce;
  return o;
}

// A rank's signals (see the top of the file): SIGUSR1 logs the flight recorder (and dumps it to
// `flight_dir` when set), the others request a stop. Runs on the signal thread.
void on_signal(int sig, const comm::Communicator* communicator, train::StopRequest* stop,
               const std::string& flight_dir, const Logger& log) {
  if (sig == SIGUSR1) {
    if (communicator == nullptr) {
      log.warn("SIGUSR1: a single process has no communicator, so no flight recorder");
      return;
    }
    const std::string dump = communicator->flight_recorder().dump_json("SIGUSR1");
    log.warn("flight recorder (SIGUSR1)", {{"flight_recorder", dump}});
    if (!flight_dir.empty()) {
      Result<std::string> path = communicator->flight_recorder().dump_to_dir(flight_dir, "SIGUSR1");
      if (path.ok()) {
        log.info("flight recorder dumped", {{"path", *path}});
      } else {
        log.warn("flight recorder dump failed", {{"error", path.status().to_string()}});
      }
    }
    return;
  }
  if (!stop->requested()) {
    log.warn("stop requested: finishing the step in progress", {{"signal", sig}});
  }
  stop->request();
}

// The SHA-256 of the config file's text, for the final JSON line (a trial run compares runs of
// the same text); "" when it cannot be read again or has grown past what a config may be.
std::string config_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string text(kConfigBytesMax + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad() || static_cast<size_t>(in.gcount()) > kConfigBytesMax) return "";
  text.resize(static_cast<size_t>(in.gcount()));
  return sched::sha256_hex(text);
}

int run_rank(const TrainFlags& flags, const GlobalOptions& globals, SignalThread* signals) {
  std::shared_ptr<LogSink> sink = open_log_sink(globals);
  if (!sink) return kExitBadInput;
  Logger log(sink, "train");

  Result<train::TrainConfig> config = train::load_train_config(flags.config_path);
  if (!config.ok()) return report_error("train", config.status());
  Status s = train::apply_overrides(overrides_of(flags), &*config);
  if (!s.ok()) return report_error("train", s);
  Result<int> progress_fd = progress_fd_from_env();
  if (!progress_fd.ok()) return report_error("train", progress_fd.status());
  if (*progress_fd >= 0) {
    // See the top of the file: outliving the agent beats dying on its closed pipes.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, nullptr);
  }
  const std::string flight_dir = flight_recorder_dir_from_env();

  // Declared before the communicator, which registers its kiln_comm_* series here and must go
  // first: rank 0 serves them beside the trainer's on --metrics-port.
  obs::MetricsRegistry registry;
  // A rank of a data-parallel job: its identity from the launcher, the store, a communicator.
  std::unique_ptr<comm::Store> store;
  std::unique_ptr<comm::Communicator> communicator;
  launch::JobAttempt job;
  int rank = 0;
  if (launched_as_rank()) {
    Result<launch::RankEnv> contract = launch::rank_env_from_process();
    if (!contract.ok()) return report_error("train", contract.status());
    const comm::RankEnvironment& env = contract->identity;
    job = contract->job;
    rank = env.rank;
    log = Logger(sink, "train.rank" + std::to_string(rank));
    if (env.world_size > 1) {
      comm::StoreClientOptions store_options;
      store_options.address = env.store_address;
      store_options.token = env.job_token;
      Result<std::unique_ptr<comm::Store>> st = comm::connect_tcp_store(store_options);
      if (!st.ok()) return report_error("train rank " + std::to_string(rank), st.status());
      store = std::move(*st);
      comm::CommOptions o;
      o.rank = env.rank;
      o.world_size = env.world_size;
      o.host = env.host;
      o.topology = env.topology;
      o.timeout_ms = flags.comm_timeout_ms;
      o.job_token = env.job_token;
      o.store_prefix = job.store_prefix() + "/train";
      o.flight_recorder_dir = flight_dir;
      Result<CpuSet> cpus = CpuSet::of_this_thread();
      log.info("joining the job",
               {{"job_id", job.id},
                {"attempt", job.attempt},
                {"store_prefix", o.store_prefix},
                {"cpus", cpus.ok() ? cpus->to_string() : cpus.status().message()}});
      Result<std::unique_ptr<comm::Communicator>> c =
          comm::Communicator::create(o, store.get(), log, &registry);
      if (!c.ok()) return report_error("train rank " + std::to_string(rank), c.status());
      communicator = std::move(*c);
    }
  }

  // Signals that came while the job was forming waited, blocked; they are handled from here.
  // The handler uses the communicator, the logger, `stop` and `flight_dir`: the guard joins the
  // signal thread before any of them goes.
  train::StopRequest stop;
  signals->start([&stop, &log, &flight_dir, c = communicator.get()](int sig) {
    on_signal(sig, c, &stop, flight_dir, log);
  });
  struct JoinSignalThread {
    SignalThread* thread;
    ~JoinSignalThread() { thread->stop(); }
  } join_signal_thread{signals};

  std::unique_ptr<obs::HttpServer> server;
  if (flags.metrics_port >= 0 && rank == 0) {
    obs::HttpServerOptions http;
    http.port = flags.metrics_port;
    http.bind_address = flags.metrics_bind;
    server = std::make_unique<obs::HttpServer>(http);
    obs::add_metrics_routes(server.get(), &registry, nullptr);
    s = server->start();
    if (!s.ok()) return report_error("train", s.with_context("--metrics-port"));
    log.info("serving metrics", {{"bind", flags.metrics_bind}, {"port", server->port()}});
  }

  train::TrainerOptions options;
  options.export_path = flags.export_path;
  options.debug_dump_dir = flags.debug_dump_dir;
  options.debug_nan_step = flags.debug_nan_step;
  options.peak_gflops = flags.peak_gflops;
  options.out = &std::cout;
  options.json = flags.json;
  options.live_progress = isatty(STDOUT_FILENO) == 1;
  options.comm = communicator.get();
  options.store = store.get();
  options.store_prefix = job.store_prefix();
  options.ckpt_dir = flags.ckpt_dir;
  options.config_sha256 = config_sha256(flags.config_path);
  options.ckpt_every = flags.ckpt_every;
  options.ckpt_keep = flags.ckpt_keep;
  options.stop_after_step = flags.stop_after_step;
  options.stop = &stop;
  options.progress_fd = *progress_fd;
  Result<train::TrainSummary> summary = train::train(*config, options, &registry, log);
  if (server) server->stop();
  if (!summary.ok()) {
    log.error("training failed", {{"error", summary.status().to_string()}});
    return report_error(rank == 0 && !communicator ? "train" : "train rank " + std::to_string(rank),
                        summary.status());
  }
  if (summary->stopped) {
    log.warn("stopped on request: a rerun with the same --ckpt-dir resumes",
             {{"steps", summary->steps},
              {"ckpt_dir", flags.ckpt_dir.empty() ? "none: nothing to resume" : flags.ckpt_dir},
              {"exit_code", launch::kExitStoppedResumable}});
    return launch::kExitStoppedResumable;
  }
  log.info("training done", {{"steps", summary->steps},
                             {"train_loss", summary->train_loss},
                             {"val_loss", summary->val_loss},
                             {"tokens_per_s", summary->tokens_per_s},
                             {"peak_rss_bytes", summary->peak_rss_bytes}});
  return kExitOk;
}

int run_train(const TrainFlags& flags, const GlobalOptions& globals) {
  // The weights are exported after the whole run: a directory that is not there fails now.
  if (!flags.export_path.empty()) {
    Status s = check_output_path("--export", flags.export_path);
    if (!s.ok()) return report_error("train", s);
  }
  // Then, before any thread: every thread inherits the mask, so only the signal thread takes
  // these (a launcher forwards them to its ranks, a rank stops or dumps).
  SignalThread signals({SIGINT, SIGTERM, SIGUSR1});
  if (flags.nproc > 1 && !launched_as_rank()) return run_launcher(flags, globals, &signals);
  return run_rank(flags, globals, &signals);
}

}  // namespace

Command add_train_command(CLI::App& parent) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* app = parent.add_subcommand("train", "Train GPT-2 on token shards as a config says");
  app->add_option("config", flags->config_path, "training config (YAML), e.g. configs/tiny.yaml")
      ->required();
  flags->max_steps_opt =
      app->add_option("--max-steps", flags->max_steps, "overrides train.max_steps");
  flags->batch_opt = app->add_option("--batch", flags->batch, "overrides train.batch");
  flags->seq_opt = app->add_option("--seq", flags->seq, "overrides train.seq");
  flags->threads_opt = app->add_option("--threads", flags->threads, "overrides train.threads");
  flags->seed_opt = app->add_option("--seed", flags->seed, "overrides train.seed");
  flags->grad_accum_opt =
      app->add_option("--grad-accum", flags->grad_accum, "overrides train.grad_accum");
  flags->val_every_opt =
      app->add_option("--val-every", flags->val_every, "overrides train.val_every");
  app->add_option("--metrics-port", flags->metrics_port, "serve /metrics here (0: pick one)")
      ->check(CLI::Range(0, 65535));
  app->add_option("--metrics-bind", flags->metrics_bind, "address to serve /metrics on")
      ->capture_default_str();
  app->add_option("--export", flags->export_path, "write the final weights here (safetensors)");
  app->add_option("--debug-dump", flags->debug_dump_dir,
                  "write initial weights, batches, step-1 logits and gradients here");
  app->add_option("--debug-nan-step", flags->debug_nan_step,
                  "a fault drill: make this step's loss NaN, so the run stops as a diverged one")
      ->check(CLI::PositiveNumber);
  app->add_option("--peak-gflops", flags->peak_gflops,
                  "peak GFLOP/s for MFU (default: measured by an sgemm probe at start-up)")
      ->check(CLI::PositiveNumber);
  app->add_option("--cpu-bind", flags->cpu_bind,
                  "with --nproc: bind each rank to its own cores (cores), leave them to the OS "
                  "(none), or give rank r list r mod N (list:0-3/4-7)")
      ->capture_default_str();
  app->add_option("--nproc", flags->nproc, "data-parallel ranks to start on this host")
      ->check(CLI::Range(1, 1024));
  flags->zero_opt = app->add_option("--zero", flags->zero, "overrides train.zero (1: ZeRO-1)");
  flags->precision_opt = app->add_option(
      "--precision", flags->precision,
      "overrides train.precision: fp32, or bf16 (bf16 matrix products, f32 master weights)");
  flags->grad_reduce_opt = app->add_option(
      "--grad-reduce", flags->grad_reduce,
      "overrides train.grad_reduce: the gradient all-reduce in fp32 or bf16 (half the bytes)");
  app->add_option("--ckpt-dir", flags->ckpt_dir,
                  "checkpoint here, resuming from the newest complete checkpoint that verifies");
  app->add_option("--ckpt-every", flags->ckpt_every, "checkpoint every N steps (and at the end)")
      ->check(CLI::Range(0, 1'000'000'000));
  app->add_option("--ckpt-keep", flags->ckpt_keep, "complete checkpoints to keep")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app->add_option("--comm-timeout-ms", flags->comm_timeout_ms,
                  "deadline of every collective: how soon the others stop when a rank dies")
      ->check(CLI::Range(1000, 3'600'000))
      ->capture_default_str();
  app->add_option("--stop-after-step", flags->stop_after_step,
                  "stop (and checkpoint) after this step; the schedule still ends at max_steps")
      ->check(CLI::Range(1, 1'000'000'000));
  app->add_flag("--json", flags->json, "print one JSON line per step and a final one");
  app->footer(
      "Signals: SIGTERM or SIGINT stops after the step in progress (every rank the same step),\n"
      "checkpoints it (with --ckpt-dir), waits until it is durable and exits 75 (stopped,\n"
      "resumable: rerun with the same --ckpt-dir to continue). SIGUSR1 logs each rank's flight\n"
      "recorder and training goes on. With --nproc the launcher forwards them to its ranks.");
  return {app, [flags](const GlobalOptions& globals) { return run_train(*flags, globals); }};
}

}  // namespace kiln::cli
