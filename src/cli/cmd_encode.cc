// `kiln encode [--encoder F] [--vocab F] [--no-special] [--json]`: reads UTF-8 text from stdin
// and prints its GPT-2 token ids as one JSON array on one line ("[15496,995]").
//
// "<|endoftext|>" in the text becomes token 50256 unless --no-special, which encodes it as
// ordinary text. Invalid UTF-8 is encoded byte by byte (include/kiln/train/tokenizer.h), so any
// input decodes back to itself with `kiln decode`.
//
// --json prints one JSON object instead: {"bytes", "tokens", "encode_s", "mb_per_s", "ids"}.
// encode_s times the encoding alone, not loading the vocabulary, reading stdin or printing
// (bench/train/tokenizer_bench uses it). Exit 2 for bad flags, a missing vocabulary file or
// input over the size limit; 1 for a malformed vocabulary file or a read error.
#include <kiln/base/clock.h>
#include <kiln/train/tokenizer.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"

namespace kiln::cli {
namespace {

// Encoding holds the text and 4 bytes per token (about one token per 4.5 bytes of English) in
// memory at once. 1 GiB is 100x the whole State of the Union corpus; bigger corpora go through
// `kiln tokenize`, one file at a time.
constexpr size_t kEncodeInputBytesMax = size_t{1} << 30;

struct EncodeOptions {
  std::string encoder = "data/gpt2/encoder.json";
  std::string vocab = "data/gpt2/vocab.bpe";
  bool no_special = false;
  bool json = false;
};

// `ids` as a compact JSON array, written straight to stdout in blocks: millions of ids would cost
// a JSON value each in nlohmann::json, and one string of them all 6 bytes per id.
void print_ids(const std::vector<uint32_t>& ids) {
  // 64 KiB blocks: few writes, a bounded buffer.
  constexpr size_t kBlockBytes = size_t{64} << 10;
  std::string out = "[";
  out.reserve(kBlockBytes + 16);
  char digits[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out.push_back(',');
    const auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), ids[i]);
    out.append(digits, end);
    if (out.size() >= kBlockBytes) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  out.push_back(']');
  std::fwrite(out.data(), 1, out.size(), stdout);
}

int run_encode_command(const EncodeOptions& options) {
  Result<train::Tokenizer> tokenizer = train::Tokenizer::load(options.encoder, options.vocab);
  if (!tokenizer.ok()) return report_error("encode", tokenizer.status());
  Result<std::string> text = read_stdin(kEncodeInputBytesMax);
  if (!text.ok()) return report_error("encode", text.status());
  std::vector<uint32_t> ids;
  Stopwatch stopwatch;
  tokenizer->encode(*text, &ids, /*allow_special=*/!options.no_special);
  const double seconds = stopwatch.elapsed_seconds();
  if (options.json) {
    nlohmann::ordered_json stats;
    stats["bytes"] = text->size();
    stats["tokens"] = ids.size();
    stats["encode_s"] = seconds;
    stats["mb_per_s"] = seconds > 0 ? static_cast<double>(text->size()) / 1e6 / seconds : 0.0;
    // The stats object with "ids" spliced in last, so the summary reads first.
    std::string head = stats.dump();
    head.pop_back();  // the closing brace
    head += ",\"ids\":";
    std::fwrite(head.data(), 1, head.size(), stdout);
    print_ids(ids);
    std::fputs("}\n", stdout);
  } else {
    print_ids(ids);
    std::fputs("\n", stdout);
  }
  if (std::fflush(stdout) != 0) {
    return report_error("encode", Status::io_error(std::string("stdout: ") + std::strerror(errno)));
  }
  return kExitOk;
}

}  // namespace

Command add_encode_command(CLI::App& parent) {
  auto options = std::make_shared<EncodeOptions>();
  CLI::App* app = parent.add_subcommand(
      "encode", "Encode UTF-8 text from stdin into GPT-2 token ids (a JSON array on stdout)");
  app->add_option("--encoder", options->encoder, "GPT-2's encoder.json")->capture_default_str();
  app->add_option("--vocab", options->vocab, "GPT-2's vocab.bpe")->capture_default_str();
  app->add_flag("--no-special", options->no_special,
                "encode \"<|endoftext|>\" as ordinary text, not as token 50256");
  app->add_flag("--json", options->json,
                "print one JSON object: bytes, tokens, encode_s, mb_per_s and ids");
  return {app, [options](const GlobalOptions&) { return run_encode_command(*options); }};
}

}  // namespace kiln::cli
