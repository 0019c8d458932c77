// `kiln decode [--encoder F] [--vocab F]`: reads a JSON array of GPT-2 token ids from stdin and
// writes the bytes they stand for to stdout, unchanged (no newline is added; the text need not
// be valid UTF-8 if the ids came from text that was not).
//
// Exit 2 for bad flags, a missing vocabulary file, input that is not a JSON array of
// non-negative integers, or an id outside the vocabulary (the message names the id and its
// index); 1 for a malformed vocabulary file or a read or write error.
#include <kiln/train/tokenizer.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/decode_input.h"

namespace kiln::cli {
namespace {

// Input is read whole (the ids take at most twice its size; see decode_input.h). 256 MiB is 40 M
// ids or more, 20x the whole State of the Union corpus.
constexpr size_t kDecodeInputBytesMax = size_t{256} << 20;
// Ids decoded and written at a time, so the output text is never held whole: a GPT-2 token is at
// most a few hundred bytes, so a chunk's text stays within a few MiB.
constexpr size_t kDecodeChunkIds = size_t{16} << 10;

struct DecodeOptions {
  std::string encoder = "data/gpt2/encoder.json";
  std::string vocab = "data/gpt2/vocab.bpe";
};

int run_decode_command(const DecodeOptions& options) {
  Result<train::Tokenizer> tokenizer = train::Tokenizer::load(options.encoder, options.vocab);
  if (!tokenizer.ok()) return report_error("decode", tokenizer.status());
  Result<std::string> input = read_stdin(kDecodeInputBytesMax);
  if (!input.ok()) return report_error("decode", input.status());
  Result<std::vector<uint32_t>> ids = parse_token_ids(*input);
  if (!ids.ok()) return report_error("decode", ids.status());
  *input = std::string();  // the text is no longer needed; free it before decoding
  // Every id is checked before the first byte is written, so a bad id leaves stdout empty.
  const uint32_t vocab = tokenizer->vocab_size();
  for (size_t i = 0; i < ids->size(); ++i) {
    if ((*ids)[i] >= vocab) {
      return report_error(
          "decode",
          Status::invalid_argument("stdin: token id " + std::to_string((*ids)[i]) + " at index " +
                                   std::to_string(i) + " is out of range: the vocabulary has " +
                                   std::to_string(vocab) + " tokens (ids 0 to " +
                                   std::to_string(vocab - 1) + ")"));
    }
  }
  const std::span<const uint32_t> all(*ids);
  for (size_t begin = 0; begin < all.size(); begin += kDecodeChunkIds) {
    const size_t n = std::min(kDecodeChunkIds, all.size() - begin);
    Result<std::string> text = tokenizer->decode(all.subspan(begin, n));
    if (!text.ok()) return report_error("decode", text.status().with_context("stdin"));
    if (std::fwrite(text->data(), 1, text->size(), stdout) != text->size()) {
      return report_error("decode",
                          Status::io_error(std::string("stdout: ") + std::strerror(errno)));
    }
  }
  if (std::fflush(stdout) != 0) {
    return report_error("decode", Status::io_error(std::string("stdout: ") + std::strerror(errno)));
  }
  return kExitOk;
}

}  // namespace

Command add_decode_command(CLI::App& parent) {
  auto options = std::make_shared<DecodeOptions>();
  CLI::App* app = parent.add_subcommand(
      "decode", "Decode a JSON array of GPT-2 token ids from stdin into text on stdout");
  app->add_option("--encoder", options->encoder, "GPT-2's encoder.json")->capture_default_str();
  app->add_option("--vocab", options->vocab, "GPT-2's vocab.bpe")->capture_default_str();
  return {app, [options](const GlobalOptions&) { return run_decode_command(*options); }};
}

}  // namespace kiln::cli
