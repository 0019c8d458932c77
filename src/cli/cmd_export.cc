// `kiln export CONFIG.yaml [--seed S | --weights IN] [--dtype f32|bf16] --out FILE`: writes GPT-2
// weights of the config's model in the export format (safetensors, include/kiln/train/model.h):
// freshly initialised ones (seed S, default the config's train.seed), the starting point a
// reference implementation can load; or the weights of IN (a file `kiln train --export` wrote,
// F32 or BF16, checked against the config before anything of its size is allocated), to convert
// them. --dtype bf16 writes every tensor as BF16 (rounded to nearest even: half the bytes).
#include <kiln/train/model.h>
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
  std::string weights_path;
  std::string dtype = "f32";
};

int run_export(const ExportFlags& flags, const GlobalOptions& globals) {
  std::shared_ptr<LogSink> sink = open_log_sink(globals);
  if (!sink) return kExitBadInput;
  Logger log(sink, "export");
  Result<train::TrainConfig> config = train::load_train_config(flags.config_path);
  if (!config.ok()) return report_error("export", config.status());
  const uint64_t seed = flags.seed_opt->count() > 0 ? flags.seed : config->train.seed;
  const train::Precision dtype =
      flags.dtype == "bf16" ? train::Precision::kBf16 : train::Precision::kFp32;
  if (!flags.weights_path.empty() && flags.seed_opt->count() > 0) {
    return report_error(
        "export",
        Status::invalid_argument("--seed initialises weights; --weights reads them: not both"));
  }
  if (flags.weights_path.empty()) {
    Status s = train::export_initial_weights(config->model, seed, flags.out_path, dtype);
    if (!s.ok()) return report_error("export", s);
    log.info("exported initial weights",
             {{"path", flags.out_path}, {"seed", seed}, {"dtype", flags.dtype}});
    return kExitOk;
  }
  Status s = train::check_weights_file(flags.weights_path, config->model);
  Result<train::Gpt2> model =
      s.ok() ? train::Gpt2::create(config->model, 1, 1) : Result<train::Gpt2>(s);
  if (model.ok()) s = train::load_weights(&*model, flags.weights_path);
  if (!model.ok()) s = model.status();
  if (!s.ok()) return report_error("export", s.with_context("--weights"));
  s = train::save_weights(*model, flags.out_path, dtype);
  if (!s.ok()) return report_error("export", s.with_context("--out"));
  log.info("exported weights",
           {{"path", flags.out_path}, {"from", flags.weights_path}, {"dtype", flags.dtype}});
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
  app->add_option("--weights", flags->weights_path,
                  "write these weights (safetensors, F32 or BF16) instead of fresh ones");
  app->add_option("--dtype", flags->dtype, "the tensors' dtype: f32, or bf16 (half the bytes)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  return {app, [flags](const GlobalOptions& globals) { return run_export(*flags, globals); }};
}

}  // namespace kiln::cli
