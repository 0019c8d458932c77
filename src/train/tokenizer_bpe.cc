// The merge table and the heap-ordered merge loop (see tokenizer_bpe.h for why it equals GPT-2's).
#include "train/tokenizer_bpe.h"

#include <algorithm>
#include <bit>

#include <kiln/base/check.h>

namespace kiln::train::tok {

MergeTable::MergeTable(size_t merges) : capacity_(merges) {
  // At most half full keeps linear probes short (about 1.5 slots per hit on average); 16 slots
  // at least so that an empty table still has a valid mask.
  const size_t slots = std::max<size_t>(16, std::bit_ceil(2 * merges));
  slots_.assign(slots, Slot{});
  mask_ = slots - 1;
  shift_ = 64 - std::countr_zero(slots);
}

bool MergeTable::insert(uint32_t left, uint32_t right, Merge merge) {
  const uint64_t key = pack(left, right);
  KILN_CHECK(key != kEmptyKey) << "token ids must be below 2^32 - 1";
  size_t i = slot_of(key);
  for (; slots_[i].key != kEmptyKey; i = (i + 1) & mask_) {
    if (slots_[i].key == key) return false;
  }
  KILN_CHECK(size_ < capacity_) << "merge table built for " << capacity_ << " rules is full";
  slots_[i] = Slot{key, merge};
  ++size_;
  return true;
}

namespace {

using Candidate = BpeScratch::Candidate;

// Orders the heap so that its top is the lowest rank, then the leftmost position.
bool comes_later(const Candidate& a, const Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
}

}  // namespace

void bpe_encode(const MergeTable& merges, const std::array<uint32_t, 256>& byte_ids,
                std::string_view piece, BpeScratch* scratch, std::vector<uint32_t>* out) {
  const size_t n = piece.size();
  KILN_CHECK(n > 0 && n < (size_t{1} << 31)) << "piece of " << n << " bytes";
  if (n == 1) {
    out->push_back(byte_ids[static_cast<uint8_t>(piece[0])]);
    return;
  }
  std::vector<BpeScratch::Symbol>& symbols = scratch->symbols;
  std::vector<Candidate>& heap = scratch->heap;
  symbols.resize(n);
  heap.clear();
  for (size_t i = 0; i < n; ++i) {
    symbols[i] = {byte_ids[static_cast<uint8_t>(piece[i])], static_cast<int32_t>(i) - 1,
                  i + 1 < n ? static_cast<int32_t>(i + 1) : -1, true};
  }
  auto push_pair = [&](uint32_t left, uint32_t right) {
    const uint32_t left_id = symbols[left].id;
    const uint32_t right_id = symbols[right].id;
    const MergeTable::Merge* merge = merges.find(left_id, right_id);
    if (merge == nullptr) return;
    heap.push_back({merge->rank, left, right, left_id, right_id, merge->merged});
    std::push_heap(heap.begin(), heap.end(), comes_later);
  };
  for (uint32_t i = 0; i + 1 < n; ++i)
    push_pair(i, i + 1);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), comes_later);
    const Candidate c = heap.back();
    heap.pop_back();
    BpeScratch::Symbol& left = symbols[c.left];
    BpeScratch::Symbol& right = symbols[c.right];
    // Stale: one side was merged away, or grew into a longer token since the push. (Ids only
    // grow longer at a position, so an unchanged id means an unchanged symbol.)
    if (!left.live || !right.live || left.id != c.left_id || right.id != c.right_id) continue;
    left.id = c.merged;
    left.next = right.next;
    right.live = false;
    if (right.next >= 0) symbols[right.next].prev = static_cast<int32_t>(c.left);
    if (left.prev >= 0) push_pair(static_cast<uint32_t>(left.prev), c.left);
    if (left.next >= 0) push_pair(c.left, static_cast<uint32_t>(left.next));
  }
  // Symbol 0 is never the right side of a merge, so it heads the list.
  for (int32_t i = 0; i >= 0; i = symbols[i].next)
    out->push_back(symbols[i].id);
}

}  // namespace kiln::train::tok
