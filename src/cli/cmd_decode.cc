// `kiln decode [--encoder F] [--vocab F]`: reads a JSON array of GPT-2 token ids from stdin and
// writes the bytes they stand for to stdout, unchanged (no newline is added; the text need not
// be valid UTF-8 if the ids came from text that was not).
//
// Exit 2 for bad flags, a missing vocabulary file, input that is not a JSON array of
// non-negative integers, or an id outside the vocabulary (the message names the id and its
// index); 1 for a malformed vocabulary file or a read or write error.
#include <kiln/train/tokenizer.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"

namespace kiln::cli {
namespace {

// A JSON array of ids takes up to 6 bytes an id and nlohmann::json about 16 bytes a value
// while it is parsed; 256 MiB of input is 40 M ids or more, 20x the whole State of the Union
// corpus, and bounds the parse to a few GiB.
constexpr size_t kDecodeInputBytesMax = size_t{256} << 20;

struct DecodeOptions {
  std::string encoder = "data/gpt2/encoder.json";
  std::string vocab = "data/gpt2/vocab.bpe";
};

// The ids of a JSON array. InvalidArgument naming the element that is not an integer that fits
// in 32 bits; whether an id is in the vocabulary is decode()'s to say.
Result<std::vector<uint32_t>> parse_ids(const std::string& text) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(std::string("stdin: ") + e.what());
  }
  if (!doc.is_array()) {
    return Status::invalid_argument(std::string("stdin: expected a JSON array of token ids, not ") +
                                    doc.type_name());
  }
  std::vector<uint32_t> ids;
  ids.reserve(doc.size());
  for (size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& value = doc[i];
    if (!value.is_number_unsigned()) {
      return Status::invalid_argument(
          "stdin: element " + std::to_string(i) + " is not a token id (a non-negative integer): " +
          value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    const uint64_t id = value.get<uint64_t>();
    if (id > std::numeric_limits<uint32_t>::max()) {
      return Status::invalid_argument("token id " + std::to_string(id) + " at index " +
                                      std::to_string(i) + " is out of range");
    }
    ids.push_back(static_cast<uint32_t>(id));
  }
  return ids;
}

int run_decode_command(const DecodeOptions& options) {
  Result<train::Tokenizer> tokenizer = train::Tokenizer::load(options.encoder, options.vocab);
  if (!tokenizer.ok()) return report_error("decode", tokenizer.status());
  Result<std::string> input = read_stdin(kDecodeInputBytesMax);
  if (!input.ok()) return report_error("decode", input.status());
  Result<std::vector<uint32_t>> ids = parse_ids(*input);
  if (!ids.ok()) return report_error("decode", ids.status());
  Result<std::string> text = tokenizer->decode(*ids);
  if (!text.ok()) return report_error("decode", text.status().with_context("stdin"));
  if (std::fwrite(text->data(), 1, text->size(), stdout) != text->size() ||
      std::fflush(stdout) != 0) {
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
