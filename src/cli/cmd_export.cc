// `kiln export CONFIG.yaml [--seed S] --out FILE`: writes freshly initialised GPT-2 weights of the
// config's model (seed S, default the config's train.seed) in the export format (safetensors,
// include/kiln/train/model.h): the starting point a reference implementation can load.
#include <kiln/train/train_config.h>
#include <kiln/train/trainer.h>

#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"

namespace kiln::cli {
namespace {

struct ExportFlags {
  std::string config_path;
  uint64_t seed = 0;
  CLI::Option* seed_opt = nullptr;
  std::string out_path;
};

int run_export(const ExportFlags& flags, const GlobalOptions& globals) {
  std::shared_ptr<LogSink> sink = open_log_sink(globals);
  if (!sink) return kExitBadInput;
  Logger log(sink, "export");
  Result<train::TrainConfig> config = train::load_train_config(flags.config_path);
  if (!config.ok()) return report_error("export", config.status());
  const uint64_t seed = flags.seed_opt->count() > 0 ? flags.seed : config->train.seed;
  Status s = train::export_initial_weights(config->model, seed, flags.out_path);
  if (!s.ok()) return report_error("export", s);
  log.info("exported initial weights", {{"path", flags.out_path}, {"seed", seed}});
  return kExitOk;
}

}  // namespace

Command add_export_command(CLI::App& parent) {
  auto flags = std::make_shared<ExportFlags>();
  CLI::App* app =
      parent.add_subcommand("export", "Write a config's freshly initialised weights (safetensors)");
  app->add_option("config", flags->config_path, "training config (YAML)")->required();
  flags->seed_opt =
      app->add_option("--seed", flags->seed, "initialisation seed (default: train.seed)");
  app->add_option("--out", flags->out_path, "the weights file to write")->required();
  return {app, [flags](const GlobalOptions& globals) { return run_export(*flags, globals); }};
}

}  // namespace kiln::cli
