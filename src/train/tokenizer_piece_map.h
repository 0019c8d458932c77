// PieceMap: a hash map from short byte strings to 32-bit values that stores no keys itself.
//
// Both of the tokenizer's lookups by piece use it: the model's index of whole tokens (a piece
// that BPE encodes as one token whose bytes it is) and encode()'s per-call cache. In each, the
// value identifies where the key lives (a token id, a cache entry), so a slot is only 8 bytes:
// 32 bits of the key's hash and the value. A lookup compares hashes first and fetches the key
// through `key_of(value)` only when they match.
//
// Open addressing with linear probing, at most half full (the owner grows it or stops
// inserting). Not thread-safe to modify; lookups on an unchanging map are.
#ifndef KILN_TRAIN_TOKENIZER_PIECE_MAP_H_
#define KILN_TRAIN_TOKENIZER_PIECE_MAP_H_

#include <kiln/base/check.h>
#include <kiln/base/checksum.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string_view>
#include <vector>

namespace kiln::train::tok {

class PieceMap {
 public:
  static constexpr uint32_t kNone = ~uint32_t{0};  // "not found"; never a stored value

  // The hash lookups and inserts take: XXH3-64, whose short-input path costs a few ns.
  static uint64_t hash(std::string_view key) { return xxh3(key); }

  // A map that holds up to `entries` values without growing.
  explicit PieceMap(size_t entries = 0) {
    reset_slots(std::bit_ceil(std::max<size_t>(8, 2 * entries)));
  }

  // The value whose key equals `key` (hash(key) == `key_hash`), or kNone. `key_of(value)`
  // returns the key stored with a value.
  template <typename KeyOf>
  uint32_t find(std::string_view key, uint64_t key_hash, const KeyOf& key_of) const {
    const auto tag = static_cast<uint32_t>(key_hash >> 32);
    for (size_t i = tag & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.value == kNone) return kNone;
      if (slot.tag == tag && key_of(slot.value) == key) return slot.value;
    }
  }

  // Adds `value` under a key whose hash is `key_hash`, growing when half full.
  // REQUIRES: the key is not in the map; value != kNone.
  void insert(uint64_t key_hash, uint32_t value) {
    KILN_CHECK(value != kNone);
    if (2 * (size_ + 1) > slots_.size()) grow();
    place(static_cast<uint32_t>(key_hash >> 32), value);
    ++size_;
  }

  size_t size() const { return size_; }

 private:
  struct Slot {
    uint32_t tag = 0;  // the high half of the key's hash; its low bits pick the first slot
    uint32_t value = kNone;
  };

  void reset_slots(size_t count) {
    slots_.assign(count, Slot{});
    mask_ = count - 1;
  }

  void place(uint32_t tag, uint32_t value) {
    size_t i = tag & mask_;
    while (slots_[i].value != kNone)
      i = (i + 1) & mask_;
    slots_[i] = Slot{tag, value};
  }

  // Doubles the slots; the stored tags say where each value goes without rehashing keys.
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    reset_slots(old.size() * 2);
    for (const Slot& slot : old) {
      if (slot.value != kNone) place(slot.tag, slot.value);
    }
  }

  std::vector<Slot> slots_;  // a power of two long
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace kiln::train::tok

#endif  // KILN_TRAIN_TOKENIZER_PIECE_MAP_H_
