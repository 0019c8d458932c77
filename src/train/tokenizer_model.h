// The tables a Tokenizer encodes and decodes with, and how they are built from GPT-2's files.
//
// encoder.json: one JSON object mapping every token, written in GPT-2's byte alphabet
// (tokenizer_byte_map.h), to its id. The ids must be exactly 0 .. N-1, every single byte must
// be a token, and "<|endoftext|>" must be kEndOfText.
//
// vocab.bpe: text, one merge per line, in rank order (the first merge line has rank 0):
//
//   vocab.bpe  := [ "#" any-text "\n" ] { merge "\n" } [ merge ]
//   merge      := token " " token          (tokens in the byte alphabet, no spaces)
//
// Each merge's two tokens and their concatenation must be tokens of encoder.json; no token may
// be created by two merges, and a merge may use only single bytes and tokens created by lines
// above it (what tokenizer_bpe.h's merge loop relies on to equal GPT-2's).
//
// Errors name the file and the key or line; a missing file adds "run scripts/fetch-data".
#ifndef KILN_TRAIN_TOKENIZER_MODEL_H_
#define KILN_TRAIN_TOKENIZER_MODEL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/result.h>

#include "train/tokenizer_bpe.h"
#include "train/tokenizer_piece_map.h"

namespace kiln::train::tok {

struct TokenizerModel {
  std::string token_bytes;              // every token's raw bytes, concatenated in id order
  std::vector<uint32_t> token_offsets;  // (N + 1): token i is token_bytes[offsets[i], offsets[i+1])
  std::array<uint32_t, 256> byte_ids{};  // the token of each single byte
  MergeTable merges;
  // Every token that BPE encodes as itself (bpe(bytes of t) == [t]; most words of the vocabulary
  // are), by its bytes: a piece found here needs no merge loop. Values are token ids.
  PieceMap whole_tokens;

  uint32_t vocab_size() const { return static_cast<uint32_t>(token_offsets.size() - 1); }
  std::string_view bytes_of(uint32_t id) const {
    return std::string_view(token_bytes)
        .substr(token_offsets[id], token_offsets[id + 1] - token_offsets[id]);
  }
};

// Builds the model from the two files' contents; `encoder_name` and `vocab_name` (the paths)
// are what error messages call them.
Result<std::shared_ptr<const TokenizerModel>> build_tokenizer_model(std::string_view encoder_json,
                                                                    std::string_view vocab_bpe,
                                                                    const std::string& encoder_name,
                                                                    const std::string& vocab_name);

// Reads both files (each at most kVocabFileBytesMax) and builds the model.
Result<std::shared_ptr<const TokenizerModel>> load_tokenizer_model(const std::string& encoder_path,
                                                                   const std::string& vocab_path);

// GPT-2's files are 1.0 MB (encoder.json) and 0.46 MB (vocab.bpe); 64 MiB leaves room for a
// vocabulary ten times larger and still refuses to slurp a wrong multi-gigabyte path.
inline constexpr size_t kVocabFileBytesMax = size_t{64} << 20;

// Larger vocabularies than this are not GPT-2-like; the bound keeps ids far below the merge
// table's reserved key and makes every size fit in 32 bits.
inline constexpr uint32_t kVocabSizeMax = uint32_t{1} << 24;

}  // namespace kiln::train::tok

#endif  // KILN_TRAIN_TOKENIZER_MODEL_H_
