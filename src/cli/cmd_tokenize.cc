// `kiln tokenize IN... --out DIR [--encoder F] [--vocab F] [--shard-tokens N] [--json]`: encodes
// text files with GPT-2's byte-level BPE into token shards (include/kiln/train/shard.h) that the
// data loader reads.
//
// Every input file is one document. The stream is, for each file in the order given:
// kEndOfText, then the file's tokens (GPT-2's convention: the separator comes before each
// document). The text is encoded as ordinary text, so a literal "<|endoftext|>" inside a document
// is spelled out in ordinary tokens and never forges a document boundary. The stream is split into
// DIR/shard_000000.bin, ... of at most --shard-tokens tokens, each written atomically; DIR must not
// already hold shards.
//
// Prints a summary (files, bytes, tokens, shards, seconds and MB/s of input text encoded and
// written, seconds to load the tokenizer); --json prints it as one JSON object. Exit 2 for a
// missing or unreadable input, bad flags or an existing shard directory; 1 when writing fails.
#include <kiln/base/clock.h>
#include <kiln/train/shard.h>
#include <kiln/train/tokenizer.h>

#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"

namespace kiln::cli {
namespace {

// One document is read and encoded whole. 1 GiB is 100x the whole State of the Union corpus and
// bounds the memory one file can take (its text plus 4 bytes per token, about one per 4 bytes).
constexpr uint64_t kDocumentBytesMax = uint64_t{1} << 30;

struct TokenizeOptions {
  std::vector<std::string> inputs;
  std::string out;
  std::string encoder = "data/gpt2/encoder.json";
  std::string vocab = "data/gpt2/vocab.bpe";
  uint64_t shard_tokens = train::kDefaultShardTokens;
  bool json = false;
};

// The size of the regular file `path`; NotFound or InvalidArgument naming it otherwise.
Result<uint64_t> input_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status::not_found(path + ": cannot read input: " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Status::invalid_argument(path + ": input is not a file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > kDocumentBytesMax) {
    return Status::invalid_argument(path + ": " + std::to_string(size) +
                                    " bytes, more than one document may hold (" +
                                    std::to_string(kDocumentBytesMax) + ")");
  }
  return size;
}

Status read_document(const std::string& path, uint64_t size, std::string* text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found(path + ": cannot open input");
  text->resize(static_cast<size_t>(size));
  in.read(text->data(), static_cast<std::streamsize>(size));
  if (in.gcount() != static_cast<std::streamsize>(size)) {
    return Status::io_error(path + ": read " + std::to_string(in.gcount()) + " of " +
                            std::to_string(size) + " bytes (did it change while being read?)");
  }
  return Status();
}

struct TokenizeSummary {
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t tokens = 0;
  uint64_t shards = 0;
  double load_seconds = 0;  // reading the tokenizer's files
  double seconds = 0;       // reading, encoding and writing the documents
};

Result<TokenizeSummary> tokenize(const TokenizeOptions& options) {
  TokenizeSummary summary;
  Stopwatch stopwatch;
  // Check every input before anything is written, so a typo does not leave half a directory.
  std::vector<uint64_t> sizes;
  for (const std::string& path : options.inputs) {
    KILN_ASSIGN_OR_RETURN(const uint64_t size, input_size(path));
    sizes.push_back(size);
  }
  KILN_ASSIGN_OR_RETURN(const train::Tokenizer tokenizer,
                        train::Tokenizer::load(options.encoder, options.vocab));
  summary.load_seconds = stopwatch.elapsed_seconds();
  stopwatch.reset();
  KILN_ASSIGN_OR_RETURN(train::ShardWriter writer,
                        train::ShardWriter::create(options.out, options.shard_tokens));
  std::string text;
  std::vector<uint32_t> tokens;
  for (size_t i = 0; i < options.inputs.size(); ++i) {
    KILN_RETURN_IF_ERROR(read_document(options.inputs[i], sizes[i], &text));
    tokens.clear();
    tokens.push_back(train::kEndOfText);
    tokenizer.encode(text, &tokens, /*allow_special=*/false);
    KILN_RETURN_IF_ERROR(writer.append(tokens).with_context(options.inputs[i]));
    ++summary.files;
    summary.bytes += sizes[i];
  }
  KILN_RETURN_IF_ERROR(writer.finish());
  summary.tokens = writer.tokens_written();
  summary.shards = writer.shards_written();
  summary.seconds = stopwatch.elapsed_seconds();
  return summary;
}

int run_tokenize_command(const TokenizeOptions& options) {
  Result<TokenizeSummary> result = tokenize(options);
  if (!result.ok()) return report_error("tokenize", result.status());
  const TokenizeSummary& s = *result;
  // Input text per second of encoding and writing (loading the tokenizer is apart), the figure
  // comparable across tokenizers.
  const double mb_per_s = s.seconds > 0 ? static_cast<double>(s.bytes) / 1e6 / s.seconds : 0.0;
  if (options.json) {
    nlohmann::ordered_json out;
    out["out"] = options.out;
    out["files"] = s.files;
    out["bytes"] = s.bytes;
    out["tokens"] = s.tokens;
    out["shards"] = s.shards;
    out["load_seconds"] = s.load_seconds;
    out["seconds"] = s.seconds;
    out["mb_per_s"] = mb_per_s;
    std::cout << out.dump() << "\n";
  } else {
    std::cout << std::fixed << std::setprecision(2) << "tokenized " << s.files << " files ("
              << static_cast<double>(s.bytes) / 1e6 << " MB) into " << s.tokens << " tokens in "
              << s.shards << " shard(s) in " << options.out << ": " << s.seconds << " s, "
              << mb_per_s << " MB/s (tokenizer loaded in " << s.load_seconds << " s)\n";
  }
  return kExitOk;
}

}  // namespace

Command add_tokenize_command(CLI::App& parent) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* app = parent.add_subcommand(
      "tokenize", "Encode text files with GPT-2's BPE into token shards for training");
  app->add_option("inputs", options->inputs, "text files, one document each, in stream order")
      ->required();
  app->add_option("--out", options->out, "directory for shard_NNNNNN.bin (must hold no shards)")
      ->required();
  app->add_option("--encoder", options->encoder, "GPT-2 encoder.json")->capture_default_str();
  app->add_option("--vocab", options->vocab, "GPT-2 vocab.bpe")->capture_default_str();
  app->add_option("--shard-tokens", options->shard_tokens, "tokens per shard at most")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_flag("--json", options->json, "print the summary as one JSON object");
  return {app, [options](const GlobalOptions&) { return run_tokenize_command(*options); }};
}

}  // namespace kiln::cli
