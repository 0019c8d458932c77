// Tokenizer: the special-token cut, the pre-split and BPE put together, and decoding.
//
// Most pieces cost one hash lookup instead of a merge loop: a piece that is a whole token (BPE
// encodes it as itself, as it does " the" or " Congress") is found in the model's index, and
// every other piece is cached for the length of one encode() call, since natural text repeats
// its words (the SOTU corpus splits into 2.0 M pieces, 32 K of them distinct). The cache lives on
// the caller's stack, so concurrent calls share nothing.
#include <kiln/train/tokenizer.h>

#include <kiln/base/check.h>

#include <utility>

#include "train/tokenizer_bpe.h"
#include "train/tokenizer_model.h"
#include "train/tokenizer_split.h"

namespace kiln::train {
namespace {

// Distinct pieces cached per encode() call, beyond the whole tokens the model indexes (which
// need no cache). An entry takes 24 bytes, up to 32 of hash slots and 4 per id: about 70 bytes
// for an English word, so about 5 MB when full; the worst case (every piece 64 bytes that no
// merge shortens) adds 16 MiB of ids. Past the bound new pieces are encoded but not cached; the
// frequent ones show up early in any long text and are in by then.
constexpr size_t kCachePiecesMax = size_t{1} << 16;

// Longer pieces (long numbers, runs of punctuation, words glued together) rarely repeat, and
// a bound keeps one piece from filling the id pool.
constexpr size_t kCachePieceBytesMax = 64;

// BPE merges at most this many bytes at once. GPT-2's encoder merges each piece whole, and so
// does Kiln for every piece up to this length, which natural text never reaches (the longest
// piece of the SOTU corpus is a few dozen bytes; a run of 256 K letters with no space, digit or
// punctuation is not prose). A longer piece (one 300 MB "word") is merged in windows of this
// length, each cut at a UTF-8 character boundary: its ids differ from GPT-2's near the cuts, and
// it still decodes to itself. The bound keeps bpe_encode's scratch (88 bytes per byte: 16 for
// the symbol, up to 3 heap entries of 24) at 22 MiB; merging such a piece whole took 58 bytes
// of memory per input byte and ended in bad_alloc, and GPT-2's own quadratic loop would not
// finish.
constexpr size_t kBpeWindowBytesMax = size_t{256} << 10;

// The longest prefix of `piece` of at most kBpeWindowBytesMax bytes that ends before a UTF-8
// character starts, or at kBpeWindowBytesMax when no such start is near (invalid UTF-8).
size_t bpe_window_bytes(std::string_view piece) {
  if (piece.size() <= kBpeWindowBytesMax) return piece.size();
  size_t cut = kBpeWindowBytesMax;
  // A UTF-8 character has at most 3 continuation bytes (10xxxxxx).
  for (int back = 0; back < 3 && (static_cast<uint8_t>(piece[cut]) & 0xC0) == 0x80; ++back)
    --cut;
  if ((static_cast<uint8_t>(piece[cut]) & 0xC0) == 0x80) cut = kBpeWindowBytesMax;
  return cut;
}

// Everything one encode() call reuses from piece to piece.
class EncodeState {
 public:
  explicit EncodeState(const tok::TokenizerModel& model) : model_(model) {}

  // Appends the ids of `text`, which holds no special tokens (or they count as text). The text
  // must outlive this state: cache keys point into it.
  void encode_ordinary(std::string_view text, std::vector<uint32_t>* out) {
    tok::PretokenSplitter splitter(text);
    std::string_view piece;
    auto token_key = [this](uint32_t id) { return model_.bytes_of(id); };
    auto cache_key = [this](uint32_t entry) { return cached_[entry].piece; };
    while (splitter.next(&piece)) {
      if (piece.size() == 1) {
        out->push_back(model_.byte_ids[static_cast<uint8_t>(piece[0])]);
        continue;
      }
      const uint64_t hash = tok::PieceMap::hash(piece);
      const uint32_t id = model_.whole_tokens.find(piece, hash, token_key);
      if (id != tok::PieceMap::kNone) {
        out->push_back(id);
        continue;
      }
      const uint32_t entry = cache_.find(piece, hash, cache_key);
      if (entry != tok::PieceMap::kNone) {
        const CacheEntry& hit = cached_[entry];
        out->insert(out->end(), pool_.begin() + hit.offset, pool_.begin() + hit.offset + hit.count);
        continue;
      }
      const size_t before = out->size();
      for (std::string_view rest = piece; !rest.empty();) {
        const size_t window = bpe_window_bytes(rest);
        tok::bpe_encode(model_.merges, model_.byte_ids, rest.substr(0, window), &scratch_, out);
        rest.remove_prefix(window);
      }
      if (cached_.size() < kCachePiecesMax && piece.size() <= kCachePieceBytesMax) {
        cached_.push_back({piece, static_cast<uint32_t>(pool_.size()),
                           static_cast<uint32_t>(out->size() - before)});
        pool_.insert(pool_.end(), out->begin() + before, out->end());
        cache_.insert(hash, static_cast<uint32_t>(cached_.size() - 1));
      }
    }
  }

 private:
  struct CacheEntry {
    std::string_view piece;  // points into the text being encoded
    uint32_t offset;         // its ids are pool_[offset, offset + count)
    uint32_t count;
  };

  const tok::TokenizerModel& model_;
  tok::BpeScratch scratch_;
  // Bounded: kCachePiecesMax pieces of at most kCachePieceBytesMax bytes, each at most that
  // many ids.
  std::vector<CacheEntry> cached_;
  tok::PieceMap cache_;  // piece -> index into cached_
  std::vector<uint32_t> pool_;
};

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const tok::TokenizerModel> model) : model_(std::move(model)) {
  KILN_CHECK(model_ != nullptr);
}

Result<Tokenizer> Tokenizer::load(const std::string& encoder_json_path,
                                  const std::string& vocab_bpe_path) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<const tok::TokenizerModel> model,
                        tok::load_tokenizer_model(encoder_json_path, vocab_bpe_path));
  return Tokenizer(std::move(model));
}

void Tokenizer::encode(std::string_view text, std::vector<uint32_t>* out,
                       bool allow_special) const {
  EncodeState state(*model_);
  if (!allow_special) {
    state.encode_ordinary(text, out);
    return;
  }
  for (size_t at = text.find(kEndOfTextString); at != std::string_view::npos;
       at = text.find(kEndOfTextString)) {
    state.encode_ordinary(text.substr(0, at), out);
    out->push_back(kEndOfText);
    text.remove_prefix(at + kEndOfTextString.size());
  }
  state.encode_ordinary(text, out);
}

Result<std::string> Tokenizer::decode(std::span<const uint32_t> ids) const {
  const uint32_t vocab = model_->vocab_size();
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= vocab) {
      return Status::invalid_argument("token id " + std::to_string(ids[i]) + " at index " +
                                      std::to_string(i) + " is out of range: the vocabulary has " +
                                      std::to_string(vocab) + " tokens (ids 0 to " +
                                      std::to_string(vocab - 1) + ")");
    }
    text += model_->bytes_of(ids[i]);
  }
  return text;
}

std::string_view Tokenizer::token_bytes(uint32_t id) const {
  KILN_CHECK(id < model_->vocab_size()) << "token id " << id << " of " << model_->vocab_size();
  return model_->bytes_of(id);
}

uint32_t Tokenizer::vocab_size() const {
  return model_->vocab_size();
}

}  // namespace kiln::train
