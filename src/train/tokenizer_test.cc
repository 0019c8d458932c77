// Tests of the Tokenizer against GPT-2's real files: the golden cases of gpt-tokenizer@4.0.0
// (its r50k_base encoding is GPT-2's), the whole SOTU corpus against the digest of the Python
// reference (tokenizer_reference.py, OpenAI's encoder.py algorithm), special tokens, invalid
// UTF-8, and the errors for bad ids and malformed files.
#include <kiln/train/tokenizer.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/testing/temp_path.h"
#include "train/tokenizer_test_util.h"

namespace kiln::train {
namespace {

using tok::testing::data_path;
using tok::testing::encoder_path;
using tok::testing::have_data;
using tok::testing::read_file;
using tok::testing::sotu_files;
using tok::testing::vocab_path;

// The GPT-2 tokenizer, loaded once per test process (loading parses 1.5 MB).
const Tokenizer* gpt2() {
  static const Result<Tokenizer> tokenizer = [] {
    return Tokenizer::load(encoder_path(), vocab_path());
  }();
  if (!have_data(encoder_path()) || !have_data(vocab_path())) return nullptr;
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  return tokenizer.ok() ? &*tokenizer : nullptr;
}

std::vector<uint32_t> encode(const Tokenizer& t, std::string_view text, bool allow_special = true) {
  std::vector<uint32_t> ids;
  t.encode(text, &ids, allow_special);
  return ids;
}

struct GoldenCase {
  int line = 0;
  std::string sample;
  std::vector<uint32_t> ids;
};

// The r50k_base blocks of TestPlans.txt: "EncodingName: r50k_base", "Sample: <text>",
// "Encoded: [id, id, ...]" on consecutive lines.
std::vector<GoldenCase> r50k_cases(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t start = 0; start <= text.size();) {
    size_t stop = text.find('\n', start);
    if (stop == std::string::npos) stop = text.size();
    lines.push_back(text.substr(start, stop - start));
    start = stop + 1;
  }
  std::vector<GoldenCase> cases;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i] != "EncodingName: r50k_base") continue;
    EXPECT_LT(i + 2, lines.size());
    if (i + 2 >= lines.size()) break;
    const std::string& sample = lines[i + 1];
    const std::string& encoded = lines[i + 2];
    EXPECT_TRUE(sample.starts_with("Sample: ")) << "line " << i + 2;
    EXPECT_TRUE(encoded.starts_with("Encoded: [") && encoded.ends_with("]")) << "line " << i + 3;
    GoldenCase c;
    c.line = static_cast<int>(i + 2);
    c.sample = sample.substr(std::string_view("Sample: ").size());
    const nlohmann::json ids = nlohmann::json::parse(encoded.substr(9), nullptr, false);
    EXPECT_TRUE(ids.is_array()) << "line " << i + 3;
    if (ids.is_array()) c.ids = ids.get<std::vector<uint32_t>>();
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST(Tokenizer, LoadsGpt2) {
  const Tokenizer* t = gpt2();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 50257u);
  EXPECT_EQ(t->token_bytes(kEndOfText), "<|endoftext|>");
  EXPECT_EQ(t->token_bytes(262), " the");
  EXPECT_EQ(t->token_bytes(198), "\n");
  EXPECT_EQ(t->token_bytes(187), "\xff");  // byte tokens are in the byte alphabet's order
}

TEST(Tokenizer, AllGoldenR50kCasesExact) {
  const Tokenizer* t = gpt2();
  ASSERT_NE(t, nullptr);
  const std::string path = data_path("gpt2/TestPlans.txt");
  ASSERT_TRUE(have_data(path));
  const std::vector<GoldenCase> cases = r50k_cases(read_file(path));
  ASSERT_EQ(cases.size(), 64u) << path << " should hold 64 r50k_base cases";
  for (const GoldenCase& c : cases) {
    EXPECT_EQ(encode(*t, c.sample), c.ids) << path << ":" << c.line << ": " << c.sample;
    Result<std::string> back = t->decode(c.ids);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, c.sample) << path << ":" << c.line;
  }
}

// FNV-1a 64 of ids as 4-byte little-endian integers (tokenizer_reference.py's digest).
uint64_t fnv1a(const std::vector<uint32_t>& ids, uint64_t hash) {
  for (uint32_t id : ids) {
    for (int shift = 0; shift < 32; shift += 8) {
      hash ^= (id >> shift) & 0xFF;
      hash *= 0x100000001B3ull;
    }
  }
  return hash;
}

TEST(Tokenizer, WholeSotuCorpusMatchesReferenceAndRoundTrips) {
  const Tokenizer* t = gpt2();
  ASSERT_NE(t, nullptr);
  const std::vector<std::string> files = sotu_files();
  ASSERT_EQ(files.size(), 233u) << "212 train + 21 val addresses; run scripts/fetch-data";
  size_t bytes = 0;
  size_t tokens = 0;
  uint64_t hash = 0xCBF29CE484222325ull;
  for (const std::string& path : files) {
    const std::string text = read_file(path);
    const std::vector<uint32_t> ids = encode(*t, text);
    Result<std::string> back = t->decode(ids);
    ASSERT_TRUE(back.ok()) << path << ": " << back.status().to_string();
    ASSERT_EQ(*back, text) << path << " does not round-trip";
    bytes += text.size();
    tokens += ids.size();
    hash = fnv1a(ids, hash);
  }
  // `python3 src/train/tokenizer_reference.py digest` printed:
  //   files 233 bytes 10761413 tokens 2074279 fnv1a64 0x935f5306288caa0b
  EXPECT_EQ(bytes, 10761413u);
  EXPECT_EQ(tokens, 2074279u);
  EXPECT_EQ(hash, 0x935f5306288caa0bull) << "some ids differ from GPT-2's encoder.py";
}

TEST(Tokenizer, EndOfTextIsOneTokenOnlyWhenAllowed) {
  const Tokenizer* t = gpt2();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(encode(*t, "<|endoftext|>"), std::vector<uint32_t>{kEndOfText});
  EXPECT_EQ(encode(*t, "a<|endoftext|>b"), (std::vector<uint32_t>{64, kEndOfText, 65}));
  EXPECT_EQ(encode(*t, "<|endoftext|><|endoftext|>"),
            (std::vector<uint32_t>{kEndOfText, kEndOfText}));
  // The text on either side is split on its own: " " does not prefix the special token.
  EXPECT_EQ(encode(*t, "Hello world <|endoftext|>"),
            (std::vector<uint32_t>{15496, 995, 220, kEndOfText}));
  // Without allow_special it is text, as encoder.py (which has no special tokens) encodes it.
  EXPECT_EQ(encode(*t, "a<|endoftext|>b", false),
            (std::vector<uint32_t>{64, 27, 91, 437, 1659, 5239, 91, 29, 65}));
  EXPECT_EQ(
      encode(*t, "<|endoftext|><|endoftext|>", false),
      (std::vector<uint32_t>{27, 91, 437, 1659, 5239, 91, 6927, 91, 437, 1659, 5239, 91, 29}));
  // A partial marker is text either way.
  EXPECT_EQ(encode(*t, "<|endoftext|"), encode(*t, "<|endoftext|", false));
  Result<std::string> back = t->decode(std::vector<uint32_t>{64, kEndOfText, 65});
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, "a<|endoftext|>b");
}

TEST(Tokenizer, EncodeAppends) {
  const Tokenizer* t = gpt2();
  ASSERT_NE(t, nullptr);
  std::vector<uint32_t> ids = {kEndOfText};
  t->encode("Hello world", &ids);
  EXPECT_EQ(ids, (std::vector<uint32_t>{kEndOfText, 15496, 995}));
  t->encode("", &ids);
  EXPECT_EQ(ids.size(), 3u);
}

TEST(Tokenizer, InvalidUtf8RoundTripsBytewise) {
  const Tokenizer* t = gpt2();
  ASSERT_NE(t, nullptr);
  std::vector<std::string> texts = {"\xff",
                                    "abc\x80"
                                    "def",
                                    "\xe2\x82",
                                    "caf\xc3",
                                    "\xed\xa0\x80",
                                    "\xc0\xaf",
                                    "\xf4\x90\x80\x80",
                                    "ok \xfe\xff ok",
                                    "\xc3\xa9\xa9"};
  std::string every_byte;
  for (int b = 0; b < 256; ++b)
    every_byte.push_back(static_cast<char>(b));
  texts.push_back(every_byte);
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) {
    std::string random;
    for (int j = static_cast<int>(rng() % 200); j > 0; --j)
      random.push_back(static_cast<char>(rng() % 256));
    texts.push_back(random);
  }
  for (const std::string& text : texts) {
    for (bool allow_special : {true, false}) {
      const std::vector<uint32_t> ids = encode(*t, text, allow_special);
      Result<std::string> back = t->decode(ids);
      ASSERT_TRUE(back.ok()) << back.status().to_string();
      EXPECT_EQ(*back, text);
    }
  }
  // A lone byte is its byte token.
  EXPECT_EQ(encode(*t, "\xff"), std::vector<uint32_t>{187});
}

TEST(Tokenizer, DecodeNamesAnOutOfRangeId) {
  const Tokenizer* t = gpt2();
  ASSERT_NE(t, nullptr);
  Result<std::string> r = t->decode(std::vector<uint32_t>{64, 50257, 65});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().is_invalid_argument());
  EXPECT_NE(r.status().message().find("50257"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("index 1"), std::string::npos) << r.status().message();
  Result<std::string> big = t->decode(std::vector<uint32_t>{4000000000u});
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("4000000000"), std::string::npos);
  Result<std::string> empty = t->decode({});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
}

// Malformed vocabulary files: each error is Corruption (NotFound for a missing file) and names
// the file and the key or line.
class TokenizerFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(have_data(encoder_path()) && have_data(vocab_path()));
    dir_ = kiln::testing::unique_temp_dir("tokenizer");
    encoder_ = nlohmann::json::parse(read_file(encoder_path()));
    vocab_ = read_file(vocab_path());
  }

  // Writes the (edited) files and loads them; the error, or OK.
  Status load() {
    const std::string enc = dir_ + "/encoder.json";
    const std::string voc = dir_ + "/vocab.bpe";
    std::ofstream(enc, std::ios::binary)
        << (encoder_text_.empty() ? encoder_.dump() : encoder_text_);
    std::ofstream(voc, std::ios::binary) << vocab_;
    return Tokenizer::load(enc, voc).status();
  }

  // Replaces line `number` (1-based) of vocab.bpe.
  void set_vocab_line(int number, const std::string& line) {
    size_t start = 0;
    for (int i = 1; i < number; ++i)
      start = vocab_.find('\n', start) + 1;
    vocab_.replace(start, vocab_.find('\n', start) - start, line);
  }

  static void expect_error(const Status& s, const std::string& file, const std::string& where) {
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(s.is_corruption()) << s.to_string();
    EXPECT_NE(s.message().find(file), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find(where), std::string::npos) << s.to_string();
  }

  std::string dir_;
  nlohmann::json encoder_;
  std::string encoder_text_;  // when set, written instead of encoder_
  std::string vocab_;
};

TEST_F(TokenizerFiles, UnchangedFilesLoad) {
  EXPECT_TRUE(load().ok());
}

TEST_F(TokenizerFiles, MissingFileSaysRunFetchData) {
  const Status s = Tokenizer::load(dir_ + "/nope.json", vocab_path()).status();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.is_not_found()) << s.to_string();
  EXPECT_NE(s.message().find(dir_ + "/nope.json"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("run scripts/fetch-data"), std::string::npos) << s.to_string();
  const Status v = Tokenizer::load(encoder_path(), dir_ + "/nope.bpe").status();
  EXPECT_TRUE(v.is_not_found()) << v.to_string();
  EXPECT_NE(v.message().find("nope.bpe"), std::string::npos) << v.to_string();
}

TEST_F(TokenizerFiles, EncoderJsonSyntaxErrorNamesLine) {
  encoder_text_ = "{\n  \"a\": 0,\n  \"b\" 1\n}\n";
  expect_error(load(), "encoder.json", "line 3");
}

TEST_F(TokenizerFiles, EncoderJsonBadIdNamesKey) {
  encoder_["\u0120the"] = "262";
  expect_error(load(), "encoder.json", "key \"\u0120the\"");
  encoder_["\u0120the"] = -1;
  expect_error(load(), "encoder.json", "key \"\u0120the\"");
  encoder_["\u0120the"] = 50257;
  expect_error(load(), "encoder.json", "out of range");
  encoder_["\u0120the"] = 263;  // the id of another token
  expect_error(load(), "encoder.json", "also the id of");
}

TEST_F(TokenizerFiles, EncoderJsonKeyWrittenTwice) {
  std::string text = encoder_.dump();
  const std::string from = "\"\u0120and\":290";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "\"\u0120the\":290");  // " the" is also 262
  encoder_text_ = text;
  expect_error(load(), "encoder.json", "appears twice");
}

TEST_F(TokenizerFiles, EncoderJsonKeyOutsideByteAlphabet) {
  encoder_.erase("\u0120the");
  encoder_["\u4e16"] = 262;  // 世 is not one of the 256 byte characters
  expect_error(load(), "encoder.json", "U+4E16");
}

TEST_F(TokenizerFiles, EncoderJsonNeedsEndOfTextAndEveryByte) {
  encoder_.erase("<|endoftext|>");
  encoder_["<|end|>"] = 50256;
  expect_error(load(), "encoder.json", "<|endoftext|>");
  encoder_ = nlohmann::json::parse(read_file(encoder_path()));
  encoder_.erase("\u010a");        // the newline byte's token
  encoder_["qqqqqqqqqqqq"] = 198;  // not a token of GPT-2
  expect_error(load(), "encoder.json", "byte 0x0A");
  encoder_text_ = "[1, 2]";
  expect_error(load(), "encoder.json", "expected a JSON object");
}

TEST_F(TokenizerFiles, VocabBpeBadLineNamesIt) {
  set_vocab_line(3, "garbage");
  expect_error(load(), "vocab.bpe", "line 3");
  vocab_ = read_file(vocab_path());
  set_vocab_line(5, "h  e");
  expect_error(load(), "vocab.bpe", "line 5");
  vocab_ = read_file(vocab_path());
  set_vocab_line(7, "\u4e16 x");
  expect_error(load(), "vocab.bpe", "line 7");
}

TEST_F(TokenizerFiles, VocabBpeUnknownTokenNamesLine) {
  set_vocab_line(10, "zq xj");  // "zq" is not a token of GPT-2
  expect_error(load(), "vocab.bpe", "line 10");
}

TEST_F(TokenizerFiles, VocabBpeMergeOrderIsChecked) {
  // Line 2 is "Ġ t" (creates "Ġt"); moving a line that uses "Ġt" above it must be refused, and
  // so must a line that creates a token a second time.
  set_vocab_line(2, "\u0120t he");
  expect_error(load(), "vocab.bpe", "line 2");
  vocab_ = read_file(vocab_path());
  set_vocab_line(4, "\u0120 t");
  expect_error(load(), "vocab.bpe", "line 4");
}

}  // namespace
}  // namespace kiln::train
