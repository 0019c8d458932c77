// Tests of the merge table and of bpe_encode() against GPT-2's own merge loop.
//
// The reference below is encoder.py's bpe() transcribed onto ids: find the lowest-ranked
// adjacent pair, merge all its occurrences left to right, repeat. bpe_encode() must give the
// same ids for every piece of the SOTU corpus and for long pieces, where its heap takes over
// what the reference does in quadratic time.
#include "train/tokenizer_bpe.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "train/tokenizer_model.h"
#include "train/tokenizer_split.h"
#include "train/tokenizer_test_util.h"

namespace kiln::train::tok {
namespace {

using testing::encoder_path;
using testing::have_data;
using testing::read_file;
using testing::sotu_files;
using testing::vocab_path;

std::vector<uint32_t> gpt2_bpe(const TokenizerModel& model, std::string_view piece) {
  std::vector<uint32_t> word;
  for (char c : piece)
    word.push_back(model.byte_ids[static_cast<uint8_t>(c)]);
  while (word.size() > 1) {
    const MergeTable::Merge* best = nullptr;
    uint32_t first = 0, second = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const MergeTable::Merge* m = model.merges.find(word[i], word[i + 1]);
      if (m != nullptr && (best == nullptr || m->rank < best->rank)) {
        best = m;
        first = word[i];
        second = word[i + 1];
      }
    }
    if (best == nullptr) break;
    std::vector<uint32_t> merged;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(best->merged);
        i += 2;
      } else {
        merged.push_back(word[i]);
        i += 1;
      }
    }
    word = std::move(merged);
  }
  return word;
}

std::shared_ptr<const TokenizerModel> load_model() {
  if (!have_data(encoder_path()) || !have_data(vocab_path())) return nullptr;
  Result<std::shared_ptr<const TokenizerModel>> model =
      load_tokenizer_model(encoder_path(), vocab_path());
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return model.ok() ? *model : nullptr;
}

std::vector<uint32_t> kiln_bpe(const TokenizerModel& model, std::string_view piece,
                               BpeScratch* scratch) {
  std::vector<uint32_t> ids;
  bpe_encode(model.merges, model.byte_ids, piece, scratch, &ids);
  return ids;
}

TEST(MergeTable, FindsWhatWasInsertedAndRefusesRepeats) {
  MergeTable table(3);
  EXPECT_EQ(table.find(1, 2), nullptr);
  EXPECT_TRUE(table.insert(1, 2, {0, 100}));
  EXPECT_TRUE(table.insert(2, 1, {1, 101}));
  EXPECT_TRUE(table.insert(0, 0, {2, 102}));
  EXPECT_FALSE(table.insert(1, 2, {7, 107}));
  EXPECT_EQ(table.size(), 3u);
  ASSERT_NE(table.find(1, 2), nullptr);
  EXPECT_EQ(table.find(1, 2)->rank, 0u);
  EXPECT_EQ(table.find(1, 2)->merged, 100u);
  EXPECT_EQ(table.find(2, 1)->merged, 101u);
  EXPECT_EQ(table.find(0, 0)->merged, 102u);
  EXPECT_EQ(table.find(2, 2), nullptr);
  EXPECT_EQ(table.find(0, 1), nullptr);
}

TEST(MergeTable, HoldsManyKeysThatShareBits) {
  // Ids that differ only in high bits, or only in one half of the packed key, still land apart.
  constexpr uint32_t kKeys = 5000;
  MergeTable table(2 * kKeys);
  for (uint32_t i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(table.insert(i << 12, 7, {i, i}));
    ASSERT_TRUE(table.insert(7, i << 12, {kKeys + i, i}));
  }
  for (uint32_t i = 0; i < kKeys; ++i) {
    ASSERT_NE(table.find(i << 12, 7), nullptr);
    EXPECT_EQ(table.find(i << 12, 7)->rank, i);
    EXPECT_EQ(table.find(7, i << 12)->rank, kKeys + i);
  }
  EXPECT_EQ(table.find(1, 7), nullptr);
}

TEST(BpeEncode, EqualsGpt2MergeLoopOnEveryCorpusPiece) {
  std::shared_ptr<const TokenizerModel> model = load_model();
  if (model == nullptr) return;
  std::set<std::string> pieces;
  for (const std::string& path : sotu_files()) {
    const std::string text = read_file(path);
    PretokenSplitter splitter(text);
    std::string_view piece;
    while (splitter.next(&piece))
      pieces.emplace(piece);
  }
  ASSERT_GT(pieces.size(), 30000u) << "the SOTU corpus has about 32 K distinct pieces";
  BpeScratch scratch;
  for (const std::string& piece : pieces)
    ASSERT_EQ(kiln_bpe(*model, piece, &scratch), gpt2_bpe(*model, piece)) << "piece " << piece;
}

TEST(BpeEncode, EqualsGpt2MergeLoopOnLongPieces) {
  std::shared_ptr<const TokenizerModel> model = load_model();
  if (model == nullptr) return;
  std::mt19937 rng(11);
  std::vector<std::string> pieces = {std::string(1000, 'a'), std::string(999, ' '),
                                     std::string(777, '-'), std::string(500, '0')};
  std::string ab;
  for (int i = 0; i < 400; ++i)
    ab += i % 3 ? "ab" : "ba";
  pieces.push_back(ab);
  for (int i = 0; i < 20; ++i) {
    std::string letters;
    for (int j = 0; j < 1500; ++j)
      letters.push_back(static_cast<char>('a' + rng() % (i % 2 ? 26 : 4)));
    pieces.push_back(letters);
    std::string bytes;
    for (int j = 0; j < 700; ++j)
      bytes.push_back(static_cast<char>(rng() % 256));
    pieces.push_back(bytes);
  }
  BpeScratch scratch;
  for (const std::string& piece : pieces) {
    const std::vector<uint32_t> ids = kiln_bpe(*model, piece, &scratch);
    ASSERT_EQ(ids, gpt2_bpe(*model, piece)) << "piece of " << piece.size() << " bytes";
    std::string back;
    for (uint32_t id : ids)
      back += model->bytes_of(id);
    EXPECT_EQ(back, piece);
  }
}

TEST(BpeEncode, KnownMerges) {
  std::shared_ptr<const TokenizerModel> model = load_model();
  if (model == nullptr) return;
  BpeScratch scratch;
  EXPECT_EQ(kiln_bpe(*model, " the", &scratch), std::vector<uint32_t>{262});
  EXPECT_EQ(kiln_bpe(*model, "Hello", &scratch), std::vector<uint32_t>{15496});
  EXPECT_EQ(kiln_bpe(*model, "\n", &scratch), std::vector<uint32_t>{198});
  // No merge joins these two bytes: they stay one token each.
  EXPECT_EQ(kiln_bpe(*model, "\xff\xfe", &scratch),
            (std::vector<uint32_t>{model->byte_ids[0xff], model->byte_ids[0xfe]}));
}

}  // namespace
}  // namespace kiln::train::tok
