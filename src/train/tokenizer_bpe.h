// Byte-pair encoding of one pre-split piece: the merge table and the merge loop.
//
// GPT-2's encoder.py turns a piece into one symbol per byte, then repeatedly finds the adjacent
// pair of symbols with the lowest merge rank and merges every occurrence of it, left to right
// and without overlap, until no adjacent pair has a rank. bpe_encode() gives the same result in
// O(n log n) for a piece of n bytes instead of O(n^2): a min-heap of candidate pairs ordered by
// (rank, position) pops the lowest-ranked pair, leftmost first, merges it, and pushes the two
// pairs the merge creates.
//
// Why that is the same: merging the leftmost occurrence of the lowest-ranked pair (A, B) creates
// pairs with the new token AB, and every merge that uses AB comes after (has a higher rank
// than) the one merge that creates it. So the lowest rank present stays that of (A, B) until
// every occurrence is merged, and they are merged in the same left-to-right order as GPT-2's
// pass. The loader (tokenizer_model.cc) rejects merge lists without that property: each token
// is created by at most one merge, and a merge only uses bytes and tokens created above it.
#ifndef KILN_TRAIN_TOKENIZER_BPE_H_
#define KILN_TRAIN_TOKENIZER_BPE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace kiln::train::tok {

// Merge rules keyed by the pair of token ids they merge: an open-addressing hash table with
// linear probing, at most half full. Immutable once built; lookups are thread-safe.
class MergeTable {
 public:
  struct Merge {
    uint32_t rank;    // the line of vocab.bpe it comes from, 0 first: lower merges first
    uint32_t merged;  // the token id of the concatenation
  };

  // A table with room for `merges` rules.
  explicit MergeTable(size_t merges = 0);

  // Adds a rule. Returns false (and changes nothing) if the pair already has one.
  // REQUIRES: a new pair finds fewer rules than the constructor's `merges`; ids below 2^32 - 1.
  bool insert(uint32_t left, uint32_t right, Merge merge);

  // The rule for (left, right), or null when there is none.
  const Merge* find(uint32_t left, uint32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.key == key) return &slot.merge;
      if (slot.key == kEmptyKey) return nullptr;
    }
  }

  size_t size() const { return size_; }

 private:
  // No pair packs to this: it would need both ids to be 2^32 - 1.
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};

  struct Slot {
    uint64_t key = kEmptyKey;
    Merge merge{};
  };

  static uint64_t pack(uint32_t left, uint32_t right) { return (uint64_t{left} << 32) | right; }
  // Fibonacci hashing: the top bits of key * 2^64/phi spread consecutive ids over the table.
  size_t slot_of(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }

  std::vector<Slot> slots_;  // a power of two long
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// Working memory of bpe_encode(), reused from one piece to the next so that encoding a text
// allocates only while the longest piece so far grows. One per thread.
struct BpeScratch {
  struct Symbol {
    uint32_t id;
    int32_t prev;  // index of the previous live symbol, -1 for the first
    int32_t next;  // index of the next live symbol, -1 for the last
    bool live;
  };
  struct Candidate {
    uint32_t rank;
    uint32_t left;  // symbol indices of the pair
    uint32_t right;
    uint32_t left_id;  // the pair's ids when it was pushed: it is stale once either changed
    uint32_t right_id;
    uint32_t merged;
  };
  std::vector<Symbol> symbols;  // (n) for a piece of n bytes
  std::vector<Candidate> heap;  // at most 3n: n - 1 pairs, then 2 per merge
};

// Appends the token ids of `piece` to `out`. `byte_ids[b]` is the token of the single byte b.
// REQUIRES: piece is not empty and shorter than 2^31 bytes.
void bpe_encode(const MergeTable& merges, const std::array<uint32_t, 256>& byte_ids,
                std::string_view piece, BpeScratch* scratch, std::vector<uint32_t>* out);

}  // namespace kiln::train::tok

#endif  // KILN_TRAIN_TOKENIZER_BPE_H_
