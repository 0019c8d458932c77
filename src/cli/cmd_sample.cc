// `kiln sample --weights FILE [--prompt TEXT] [--tokens N] [--top-k K] [--temperature X]
//  [--seed S] [--threads T] [--encoder PATH] [--vocab PATH] [--json]`: generates text with GPT-2
// weights (the export format; the model's shape comes from the file's __metadata__).
//
// Prints the prompt, then each generated token's bytes the moment it is drawn, then a newline.
// An empty prompt starts from "<|endoftext|>" (GPT-2's document separator), which is not
// printed. With --json nothing streams; one line at the end holds the prompt, the prompt's ids,
// the generated ids and their text (bytes that are not valid UTF-8 appear as U+FFFD there; the
// ids are exact). The same weights, prompt, flags and seed give the same tokens.
#include <kiln/base/thread_pool.h>
#include <kiln/ops/context.h>
#include <kiln/train/model.h>
#include <kiln/train/sampler.h>
#include <kiln/train/tokenizer.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"

namespace kiln::cli {
namespace {

// Far more text than a model this size writes sensibly; more is a typo.
constexpr int kSampleTokensMax = 1'000'000;
// The pool starts every thread it is given; more than this is a typo, not a machine.
constexpr int kThreadsMax = 1024;

struct SampleFlags {
  std::string weights_path;
  std::string prompt;
  train::SampleOptions options;
  int threads = 0;  // 0: one per hardware thread
  std::string encoder_path = "data/gpt2/encoder.json";
  std::string vocab_path = "data/gpt2/vocab.bpe";
  bool json = false;
};

int run_sample(const SampleFlags& flags, const GlobalOptions& globals) {
  std::shared_ptr<LogSink> sink = open_log_sink(globals);
  if (!sink) return kExitBadInput;
  Logger log(sink, "sample");
  if (!std::isfinite(flags.options.temperature)) {
    return report_error("sample", Status::invalid_argument("--temperature must be finite"));
  }

  Result<train::ModelConfig> config = train::read_weights_config(flags.weights_path);
  if (!config.ok()) return report_error("sample", config.status().with_context("--weights"));
  Result<train::Tokenizer> tokenizer = train::Tokenizer::load(flags.encoder_path, flags.vocab_path);
  if (!tokenizer.ok()) return report_error("sample", tokenizer.status());
  if (static_cast<uint32_t>(config->vocab_size) > tokenizer->vocab_size()) {
    return report_error(
        "sample", Status::invalid_argument(
                      flags.weights_path + ": vocab_size " + std::to_string(config->vocab_size) +
                      " exceeds the tokenizer's " + std::to_string(tokenizer->vocab_size())));
  }
  // The file's tensors against its metadata before a model of the claimed size is allocated: a
  // 144-byte file claiming gpt2-124m would otherwise cost 2 GB before it was found empty.
  Status checked = train::check_weights_file(flags.weights_path, *config);
  if (!checked.ok()) return report_error("sample", checked.with_context("--weights"));
  std::vector<uint32_t> context;
  tokenizer->encode(flags.prompt, &context);
  const size_t prompt_tokens = context.size();
  if (context.empty()) context.push_back(train::kEndOfText);

  // Activations for the longest window generation will use, not the whole block.
  const int seq =
      static_cast<int>(std::min<size_t>(config->block_size, context.size() + flags.options.tokens));
  Result<train::Gpt2> model = train::Gpt2::create(*config, 1, seq);
  if (!model.ok()) return report_error("sample", model.status());
  Status s = train::load_weights(&*model, flags.weights_path);
  if (!s.ok()) return report_error("sample", s.with_context("--weights"));

  const int threads = flags.threads > 0
                          ? flags.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  Result<std::unique_ptr<ThreadPool>> pool = ThreadPool::create(threads);
  if (!pool.ok()) return report_error("sample", pool.status().with_context("--threads"));
  Result<ops::Context> ctx = ops::make_cpu_context(pool->get());
  if (!ctx.ok()) return report_error("sample", ctx.status());
  log.info("sampling", {{"weights", flags.weights_path},
                        {"params", model->num_params()},
                        {"prompt_tokens", prompt_tokens},
                        {"tokens", flags.options.tokens},
                        {"top_k", flags.options.top_k},
                        {"temperature", flags.options.temperature},
                        {"seed", flags.options.seed},
                        {"threads", threads}});

  std::vector<uint32_t> generated;
  generated.reserve(static_cast<size_t>(flags.options.tokens));
  if (!flags.json) std::cout << flags.prompt << std::flush;
  s = train::generate(&*model, context, flags.options, *ctx, [&](uint32_t id) {
    generated.push_back(id);
    if (!flags.json) std::cout << tokenizer->token_bytes(id) << std::flush;
  });
  if (!s.ok()) {
    if (!flags.json) std::cout << "\n";
    return report_error("sample", s);
  }
  if (flags.json) {
    Result<std::string> text = tokenizer->decode(generated);
    if (!text.ok()) return report_error("sample", text.status());
    nlohmann::ordered_json out;
    out["prompt"] = flags.prompt;
    out["prompt_tokens"] = std::vector<uint32_t>(context.begin(), context.begin() + prompt_tokens);
    out["tokens"] = generated;
    out["text"] = *text;
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << "\n";
  }
  return kExitOk;
}

}  // namespace

Command add_sample_command(CLI::App& parent) {
  auto flags = std::make_shared<SampleFlags>();
  CLI::App* app = parent.add_subcommand("sample", "Generate text with trained GPT-2 weights");
  app->add_option("--weights", flags->weights_path, "weights file (safetensors, export format)")
      ->required();
  app->add_option("--prompt", flags->prompt, "text to continue (default: a new document)");
  app->add_option("--tokens", flags->options.tokens, "tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(0, kSampleTokensMax));
  app->add_option("--top-k", flags->options.top_k, "draw from the k likeliest tokens (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--temperature", flags->options.temperature, "softmax temperature (0: greedy)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--seed", flags->options.seed, "sampling seed")->capture_default_str();
  app->add_option("--threads", flags->threads, "compute threads (default: one per CPU)")
      ->check(CLI::Range(1, kThreadsMax));
  app->add_option("--encoder", flags->encoder_path, "GPT-2's encoder.json")->capture_default_str();
  app->add_option("--vocab", flags->vocab_path, "GPT-2's vocab.bpe")->capture_default_str();
  app->add_flag("--json", flags->json, "print one JSON line with the ids and text at the end");
  return {app, [flags](const GlobalOptions& globals) { return run_sample(*flags, globals); }};
}

}  // namespace kiln::cli
