// Builds a TokenizerModel from encoder.json and vocab.bpe (formats and rules in tokenizer_model.h).
#include "train/tokenizer_model.h"

#include <kiln/train/tokenizer.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "train/tokenizer_byte_map.h"

namespace kiln::train::tok {
namespace {

// `text` as a JSON string literal, for messages: quoted and escaped, invalid UTF-8 replaced.
std::string quote(std::string_view text) {
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Reads encoder.json as a stream of parse events (no document tree: the file has 50 K keys),
// collecting (raw bytes, id) pairs. The first error stops the parse and is kept in status().
class EncoderJsonReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit EncoderJsonReader(const std::string& name) : name_(name) {}

  const Status& status() const { return status_; }
  std::vector<std::pair<std::string, uint64_t>>& tokens() { return tokens_; }

  bool start_object(std::size_t) override {
    if (depth_ == 0) return ++depth_ > 0;
    return bad_value("an object");
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool key(string_t& key) override {
    if (key.empty()) return fail(where(key) + ": a token cannot be empty");
    Result<std::string> bytes = bytes_from_alphabet(key);
    if (!bytes.ok()) return fail(where(key) + ": " + bytes.status().message());
    key_ = key;
    key_bytes_ = std::move(bytes).value();
    return true;
  }
  bool number_unsigned(number_unsigned_t id) override {
    if (depth_ != 1) return bad_value("a number");
    tokens_.emplace_back(std::move(key_bytes_), id);
    return true;
  }
  bool number_integer(number_integer_t value) override { return bad_value(std::to_string(value)); }
  bool number_float(number_float_t, const string_t& text) override { return bad_value(text); }
  bool null() override { return bad_value("null"); }
  bool boolean(bool value) override { return bad_value(value ? "true" : "false"); }
  bool string(string_t& value) override { return bad_value("the string " + quote(value)); }
  bool binary(binary_t&) override { return bad_value("binary data"); }
  bool start_array(std::size_t) override { return bad_value("an array"); }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) override {
    return fail(name_ + ": " + e.what());  // e.what() names the line and column
  }

 private:
  std::string where(std::string_view key) const { return name_ + ": key " + quote(key); }

  bool bad_value(const std::string& what) {
    if (depth_ == 0) return fail(name_ + ": expected a JSON object of token -> id, not " + what);
    return fail(where(key_) + ": the id must be a non-negative integer, not " + what);
  }

  bool fail(std::string message) {
    status_ = Status::corruption(std::move(message));
    return false;
  }

  const std::string& name_;
  int depth_ = 0;
  std::string key_;        // the key being read, as written
  std::string key_bytes_;  // and as raw bytes
  std::vector<std::pair<std::string, uint64_t>> tokens_;
  Status status_;
};

// The tokens of encoder.json in id order, as raw bytes.
Result<std::vector<std::string>> parse_encoder_json(std::string_view text,
                                                    const std::string& name) {
  EncoderJsonReader reader(name);
  bool parsed = false;
  try {
    parsed = nlohmann::json::sax_parse(text, &reader);
  } catch (const nlohmann::json::exception& e) {
    return Status::corruption(name + ": " + e.what());
  }
  if (!parsed) {
    if (!reader.status().ok()) return reader.status();
    return Status::corruption(name + ": not valid JSON");
  }
  std::vector<std::pair<std::string, uint64_t>>& tokens = reader.tokens();
  const size_t n = tokens.size();
  if (n == 0 || n > kVocabSizeMax) {
    return Status::corruption(name + ": " + std::to_string(n) + " tokens; expected 1 to " +
                              std::to_string(kVocabSizeMax));
  }
  std::vector<std::string> bytes_by_id(n);
  std::vector<bool> assigned(n, false);
  for (auto& token : tokens) {
    std::string& bytes = token.first;
    const uint64_t id = token.second;
    auto where = [&] { return name + ": key " + quote(alphabet_from_bytes(bytes)); };
    if (id >= n) {
      return Status::corruption(where() + ": id " + std::to_string(id) +
                                " is out of range: " + std::to_string(n) +
                                " tokens have ids 0 to " + std::to_string(n - 1));
    }
    if (assigned[id]) {
      return Status::corruption(where() + ": id " + std::to_string(id) + " is also the id of key " +
                                quote(alphabet_from_bytes(bytes_by_id[id])));
    }
    bytes_by_id[id] = std::move(bytes);
    assigned[id] = true;
  }
  return bytes_by_id;
}

// The tokens of a model by their raw bytes.
class TokenFinder {
 public:
  explicit TokenFinder(const TokenizerModel& model) : model_(model), map_(model.vocab_size()) {}

  // Adds token `id`. REQUIRES: no token with the same bytes was added.
  void add(uint32_t id) { map_.insert(PieceMap::hash(model_.bytes_of(id)), id); }

  // The id of the token whose bytes are `bytes`, or PieceMap::kNone.
  uint32_t find(std::string_view bytes) const {
    return map_.find(bytes, PieceMap::hash(bytes),
                     [this](uint32_t id) { return model_.bytes_of(id); });
  }

 private:
  const TokenizerModel& model_;
  PieceMap map_;
};

// Fills model->merges from vocab.bpe.
Status parse_vocab_bpe(std::string_view text, const std::string& name, const TokenFinder& ids,
                       const std::string& encoder_name, TokenizerModel* model) {
  // The line (1-based) that creates each token: 0 for the single bytes, which need no merge.
  constexpr uint32_t kNotCreated = std::numeric_limits<uint32_t>::max();
  std::vector<uint32_t> created_by(model->vocab_size(), kNotCreated);
  for (uint32_t id : model->byte_ids)
    created_by[id] = 0;

  const size_t lines_max = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  model->merges = MergeTable(lines_max);
  // The id of one side of a merge; errors say which token, the caller adds the line.
  auto token_id = [&](std::string_view token) -> Result<uint32_t> {
    Result<std::string> bytes = bytes_from_alphabet(token);
    if (!bytes.ok()) {
      return Status::corruption("token " + quote(token) + ": " + bytes.status().message());
    }
    const uint32_t id = ids.find(*bytes);
    if (id == PieceMap::kNone) {
      return Status::corruption(quote(token) + " is not a token of " + encoder_name);
    }
    return id;
  };

  uint32_t rank = 0;
  size_t line_number = 0;
  for (size_t start = 0; start <= text.size();) {
    size_t stop = text.find('\n', start);
    const bool last = stop == std::string_view::npos;
    if (last) stop = text.size();
    const std::string_view line = text.substr(start, stop - start);
    start = stop + 1;
    ++line_number;
    if (line_number == 1 && line.starts_with('#')) continue;  // "#version: 0.2"
    if (line.empty() && last) break;                          // the final newline
    auto where = [&] { return name + " line " + std::to_string(line_number); };
    const size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      return Status::corruption(where() + ": expected two tokens separated by one space, not " +
                                quote(line));
    }
    const std::string_view left_text = line.substr(0, space);
    const std::string_view right_text = line.substr(space + 1);
    Result<uint32_t> left = token_id(left_text);
    if (!left.ok()) return left.status().with_context(where());
    Result<uint32_t> right = token_id(right_text);
    if (!right.ok()) return right.status().with_context(where());
    const std::string merged_bytes =
        std::string(model->bytes_of(*left)) + std::string(model->bytes_of(*right));
    const uint32_t merged = ids.find(merged_bytes);
    if (merged == PieceMap::kNone) {
      return Status::corruption(where() + ": the merge " +
                                quote(alphabet_from_bytes(merged_bytes)) + " is not a token of " +
                                encoder_name);
    }
    for (auto [id, token] : {std::pair{*left, left_text}, std::pair{*right, right_text}}) {
      if (created_by[id] == kNotCreated) {
        return Status::corruption(where() + ": " + quote(token) +
                                  " is used before a line creates it (merges must come in the "
                                  "order they were learned)");
      }
    }
    if (created_by[merged] != kNotCreated) {
      return Status::corruption(where() + ": " + quote(alphabet_from_bytes(merged_bytes)) +
                                " is already created by line " +
                                std::to_string(created_by[merged]));
    }
    created_by[merged] = static_cast<uint32_t>(line_number);
    const bool inserted = model->merges.insert(*left, *right, {rank, merged});
    KILN_CHECK(inserted) << "a repeated pair would have created its token twice";
    ++rank;
  }
  return Status();
}

Result<std::string> read_vocab_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::invalid_argument(path + ": is a directory, not a vocabulary file");
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    const int err = errno;
    if (err == ENOENT) return Status::not_found(path + ": no such file; run scripts/fetch-data");
    return Status::io_error(path + ": cannot open: " + std::strerror(err));
  }
  const std::streamoff size = in.tellg();
  if (size < 0) return Status::io_error(path + ": cannot tell its size");
  if (static_cast<uint64_t>(size) > kVocabFileBytesMax) {
    return Status::invalid_argument(path + ": " + std::to_string(size) + " bytes is over the " +
                                    std::to_string(kVocabFileBytesMax) +
                                    "-byte limit for a vocabulary file");
  }
  std::string text(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(text.data(), size)) return Status::io_error(path + ": read failed");
  return text;
}

}  // namespace

Result<std::shared_ptr<const TokenizerModel>> build_tokenizer_model(std::string_view encoder_json,
                                                                    std::string_view vocab_bpe,
                                                                    const std::string& encoder_name,
                                                                    const std::string& vocab_name) {
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> bytes_by_id,
                        parse_encoder_json(encoder_json, encoder_name));
  auto model = std::make_shared<TokenizerModel>();
  model->token_offsets.reserve(bytes_by_id.size() + 1);
  model->token_offsets.push_back(0);
  for (const std::string& bytes : bytes_by_id) {
    model->token_bytes += bytes;
    model->token_offsets.push_back(static_cast<uint32_t>(model->token_bytes.size()));
  }
  // The alphabet is a bijection, so only a key written twice gives two tokens the same bytes.
  TokenFinder ids(*model);
  for (uint32_t id = 0; id < model->vocab_size(); ++id) {
    const uint32_t other = ids.find(model->bytes_of(id));
    if (other != PieceMap::kNone) {
      return Status::corruption(
          encoder_name + ": key " + quote(alphabet_from_bytes(model->bytes_of(id))) +
          " appears twice, with ids " + std::to_string(other) + " and " + std::to_string(id));
    }
    ids.add(id);
  }
  const uint32_t end_of_text = ids.find(kEndOfTextString);
  if (end_of_text != kEndOfText) {
    const std::string found = end_of_text == PieceMap::kNone
                                  ? "there is none"
                                  : "it has id " + std::to_string(end_of_text);
    return Status::corruption(encoder_name + ": " + quote(kEndOfTextString) + " must have id " +
                              std::to_string(kEndOfText) + " (GPT-2's), but " + found);
  }
  for (uint32_t b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    const uint32_t id = ids.find(std::string_view(&byte, 1));
    if (id == PieceMap::kNone) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", b);
      return Status::corruption(encoder_name + ": byte " + hex + " (key " +
                                quote(alphabet_from_bytes(std::string(1, byte))) +
                                ") has no token; byte-level BPE needs one for every byte");
    }
    model->byte_ids[b] = id;
  }
  KILN_RETURN_IF_ERROR(parse_vocab_bpe(vocab_bpe, vocab_name, ids, encoder_name, model.get()));

  // The whole-token index, by running BPE on every token once (special tokens such as
  // "<|endoftext|>" are not created by merges, so BPE splits them and they stay out).
  model->whole_tokens = PieceMap(model->vocab_size());
  BpeScratch scratch;
  std::vector<uint32_t> encoded;
  for (uint32_t id = 0; id < model->vocab_size(); ++id) {
    const std::string_view bytes = model->bytes_of(id);
    encoded.clear();
    bpe_encode(model->merges, model->byte_ids, bytes, &scratch, &encoded);
    if (encoded.size() == 1 && encoded[0] == id) {
      model->whole_tokens.insert(PieceMap::hash(bytes), id);
    }
  }
  return std::shared_ptr<const TokenizerModel>(std::move(model));
}

Result<std::shared_ptr<const TokenizerModel>> load_tokenizer_model(const std::string& encoder_path,
                                                                   const std::string& vocab_path) {
  KILN_ASSIGN_OR_RETURN(const std::string encoder_json, read_vocab_file(encoder_path));
  KILN_ASSIGN_OR_RETURN(const std::string vocab_bpe, read_vocab_file(vocab_path));
  return build_tokenizer_model(encoder_json, vocab_bpe, encoder_path, vocab_path);
}

}  // namespace kiln::train::tok
