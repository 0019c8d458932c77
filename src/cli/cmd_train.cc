// `kiln train CONFIG.yaml [--max-steps N] [--batch B] [--seq T] [--threads T] [--seed S]
//  [--grad-accum K] [--val-every N] [--metrics-port P] [--metrics-bind ADDR] [--export FILE]
//  [--debug-dump DIR] [--peak-gflops X] [--json]`: trains GPT-2 as the config says (see
// include/kiln/train/train_config.h and trainer.h). Flags override the config's keys and are
// checked against the same rules; a bad config or flag exits 2 naming the file:line:key or flag.
//
// Output: with --json one JSON line per step and a final {"event":"done",...} line; otherwise
// the progress line, live when stdout is a terminal. Logs go to stderr (or --log-file).
#include <kiln/obs/http_server.h>
#include <kiln/obs/metrics.h>
#include <kiln/obs/metrics_endpoint.h>
#include <kiln/train/train_config.h>
#include <kiln/train/trainer.h>

#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"

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
  double peak_gflops = 0;
  bool json = false;
};

train::TrainOverrides overrides_of(const TrainFlags& f) {
  train::TrainOverrides o;
  if (f.max_steps_opt->count() > 0) o.max_steps = f.max_steps;
  if (f.batch_opt->count() > 0) o.batch = f.batch;
  if (f.seq_opt->count() > 0) o.seq = f.seq;
  if (f.threads_opt->count() > 0) o.threads = f.threads;
  if (f.seed_opt->count() > 0) o.seed = f.seed;
  if (f.grad_accum_opt->count() > 0) o.grad_accum = f.grad_accum;
  if (f.val_every_opt->count() > 0) o.val_every = f.val_every;
  return o;
}

int run_train(const TrainFlags& flags, const GlobalOptions& globals) {
  std::shared_ptr<LogSink> sink = open_log_sink(globals);
  if (!sink) return kExitBadInput;
  Logger log(sink, "train");

  Result<train::TrainConfig> config = train::load_train_config(flags.config_path);
  if (!config.ok()) return report_error("train", config.status());
  Status s = train::apply_overrides(overrides_of(flags), &*config);
  if (!s.ok()) return report_error("train", s);

  obs::MetricsRegistry registry;
  std::unique_ptr<obs::HttpServer> server;
  if (flags.metrics_port >= 0) {
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
  options.peak_gflops = flags.peak_gflops;
  options.out = &std::cout;
  options.json = flags.json;
  options.live_progress = isatty(STDOUT_FILENO) == 1;
  Result<train::TrainSummary> summary = train::train(*config, options, &registry, log);
  if (server) server->stop();
  if (!summary.ok()) return report_error("train", summary.status());
  log.info("training done", {{"steps", summary->steps},
                             {"train_loss", summary->train_loss},
                             {"val_loss", summary->val_loss},
                             {"tokens_per_s", summary->tokens_per_s},
                             {"peak_rss_bytes", summary->peak_rss_bytes}});
  return kExitOk;
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
  app->add_option("--peak-gflops", flags->peak_gflops,
                  "peak GFLOP/s for MFU (default: measured by an sgemm probe at start-up)")
      ->check(CLI::PositiveNumber);
  app->add_flag("--json", flags->json, "print one JSON line per step and a final one");
  return {app, [flags](const GlobalOptions& globals) { return run_train(*flags, globals); }};
}

}  // namespace kiln::cli
