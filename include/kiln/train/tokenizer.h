// GPT-2's tokenizer: byte-level BPE that gives the same ids as OpenAI's encoder.py for any text.
//
//   KILN_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load("data/gpt2/encoder.json",
//                                                        "data/gpt2/vocab.bpe"));
//   std::vector<uint32_t> ids;
//   tok.encode("Hello world", &ids);               // {15496, 995}
//   KILN_ASSIGN_OR_RETURN(std::string text, tok.decode(ids));
//
// Encoding: the text is cut at every "<|endoftext|>" (when special tokens are allowed), each
// part is pre-split with GPT-2's pattern (src/train/tokenizer_split.h), and each piece is
// byte-pair encoded (src/train/tokenizer_bpe.h); a piece over 256 KiB, which no prose has, is
// merged in windows (src/train/tokenizer.cc says why). Any byte string encodes, invalid UTF-8
// included: a byte that is not part of a valid UTF-8 character counts as punctuation in the
// pre-split, and every byte has a token. decode(encode(x)) == x for every byte string x.
//
// Character classes follow Unicode 14.0 (Python 3.11's unicodedata); code points assigned
// later count as punctuation.
//
// A Tokenizer is immutable after load(); copies share its tables, and every method is safe to
// call from many threads at once.
#ifndef KILN_TRAIN_TOKENIZER_H_
#define KILN_TRAIN_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/result.h>

namespace kiln::train {

namespace tok {
struct TokenizerModel;
}

inline constexpr uint32_t kEndOfText = 50256;  // "<|endoftext|>"
inline constexpr std::string_view kEndOfTextString = "<|endoftext|>";

class Tokenizer {
 public:
  // Reads GPT-2's encoder.json and vocab.bpe. Errors name the file and the key or line at
  // fault; a missing file is NotFound and says to run scripts/fetch-data.
  static Result<Tokenizer> load(const std::string& encoder_json_path,
                                const std::string& vocab_bpe_path);

  // Appends the ids of `text` (UTF-8; invalid sequences are encoded byte by byte) to `out`.
  // With allow_special, each "<|endoftext|>" becomes kEndOfText; without, it is ordinary text.
  void encode(std::string_view text, std::vector<uint32_t>* out, bool allow_special = true) const;

  // The bytes of `ids`, concatenated. InvalidArgument naming the first id >= vocab_size() and
  // its index.
  Result<std::string> decode(std::span<const uint32_t> ids) const;

  // The raw bytes of one token. REQUIRES: id < vocab_size().
  std::string_view token_bytes(uint32_t id) const;

  // The number of tokens, 50257 for GPT-2; ids are 0 .. vocab_size() - 1.
  uint32_t vocab_size() const;

 private:
  explicit Tokenizer(std::shared_ptr<const tok::TokenizerModel> model);

  std::shared_ptr<const tok::TokenizerModel> model_;  // never null
};

}  // namespace kiln::train

#endif  // KILN_TRAIN_TOKENIZER_H_
