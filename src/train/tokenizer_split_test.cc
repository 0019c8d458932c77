// Tests of GPT-2's pre-split and the character classes under it. The expected pieces of valid
// UTF-8 are what Python's `regex` module gives for GPT-2's pattern (regex.findall, the way
// encoder.py splits); invalid UTF-8 has no reference, so those cases state Kiln's rule
// (tokenizer_unicode.h): every invalid byte is one character of class other.
#include "train/tokenizer_split.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "train/tokenizer_unicode.h"

namespace kiln::train::tok {
namespace {

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> pieces;
  PretokenSplitter splitter(text);
  std::string_view piece;
  while (splitter.next(&piece))
    pieces.emplace_back(piece);
  return pieces;
}

struct SplitCase {
  std::string text;
  std::vector<std::string> pieces;
};

TEST(PretokenSplit, MatchesGpt2Pattern) {
  const std::vector<SplitCase> cases = {
      {"Hello world", {"Hello", " world"}},
      {"a  b", {"a", " ", " b"}},
      {"a   b", {"a", "  ", " b"}},
      {"x \ny", {"x", " ", "\n", "y"}},
      {"end  ", {"end", "  "}},
      {"  lead", {" ", " lead"}},
      {"\n\nword", {"\n", "\n", "word"}},
      {"don't", {"don", "'t"}},
      {"we're", {"we", "'re"}},
      {"I'LL", {"I", "'", "LL"}},
      {"they'll've", {"they", "'ll", "'ve"}},
      {"''s", {"''", "s"}},
      {"!'s", {"!'", "s"}},
      {" 's", {" '", "s"}},
      {"'", {"'"}},
      {"'x", {"'", "x"}},
      {"abc123def", {"abc", "123", "def"}},
      {" 42", {" 42"}},
      {"3.14", {"3", ".", "14"}},
      {"hello!!! world", {"hello", "!!!", " world"}},
      {" !!", {" !!"}},
      {"\t\tx", {"\t", "\t", "x"}},
      {"a\xe3\x80\x80"
       "b",
       {"a", "\xe3\x80\x80", "b"}},
      {"a\xe3\x80\x80\xe3\x80\x80"
       "b",
       {"a", "\xe3\x80\x80", "\xe3\x80\x80", "b"}},
      {"café naïve", {"café", " naïve"}},
      {"٣٤ x", {"٣٤", " x"}},
      {"x\xc2\xa0y", {"x", "\xc2\xa0", "y"}},
      {"½ cup", {"½", " cup"}},
      {"e\xcc\x81", {"e", "\xcc\x81"}},
      {"😀😀 ok", {"😀😀", " ok"}},
      {"a\r\nb", {"a", "\r", "\n", "b"}},
      {"   ", {"   "}},
      {" ", {" "}},
      {"a \xc2\x85"
       "b",
       {"a", " ", "\xc2\x85", "b"}},
      {"", {}},
      {"x  \n  y", {"x", "  \n ", " y"}},
  };
  for (const SplitCase& c : cases)
    EXPECT_EQ(split(c.text), c.pieces) << "text: \"" << c.text << "\"";
}

TEST(PretokenSplit, InvalidUtf8BytesArePunctuation) {
  const std::vector<SplitCase> cases = {
      {"a\xff"
       "b",
       {"a", "\xff", "b"}},
      {" \xff\xfe", {" \xff\xfe"}},  // a space prefixes a run of "other"
      {"!\x80?", {"!\x80?"}},        // a lone continuation byte joins punctuation
      {"ab\xc3", {"ab", "\xc3"}},    // a sequence cut short at the end
      {"\xe2\x82"
       "a",
       {"\xe2\x82", "a"}},                         // cut short before a letter
      {"\xed\xa0\x80", {"\xed\xa0\x80"}},          // a surrogate (U+D800) is not UTF-8
      {"\xc0\xaf", {"\xc0\xaf"}},                  // an overlong '/'
      {"\xf4\x90\x80\x80", {"\xf4\x90\x80\x80"}},  // above U+10FFFF
      {"é\xff", {"é", "\xff"}},
  };
  for (const SplitCase& c : cases)
    EXPECT_EQ(split(c.text), c.pieces) << "text: \"" << c.text << "\"";
}

// Whatever the bytes, the pieces are non-empty and put back together give the text.
TEST(PretokenSplit, PiecesCoverAnyBytesExactly) {
  std::mt19937 rng(7);
  // Bytes weighted towards what makes pieces interesting: spaces, apostrophes, UTF-8 leads.
  const std::string favourites =
      " \n'sre\xc3\xa9\xe3\x80\x80\xf0\x9f\x98\x80"
      "1!";
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int size = static_cast<int>(rng() % 64);
    for (int i = 0; i < size; ++i) {
      text.push_back(rng() % 2 ? favourites[rng() % favourites.size()]
                               : static_cast<char>(rng() % 256));
    }
    std::string joined;
    for (const std::string& piece : split(text)) {
      ASSERT_FALSE(piece.empty());
      joined += piece;
    }
    ASSERT_EQ(joined, text);
  }
}

TEST(UnicodeClass, FollowsGeneralCategoryAndWhiteSpace) {
  EXPECT_EQ(unicode_class('a'), kLetter);
  EXPECT_EQ(unicode_class('Z'), kLetter);
  EXPECT_EQ(unicode_class('7'), kNumber);
  EXPECT_EQ(unicode_class(' '), kSpace);
  EXPECT_EQ(unicode_class('\v'), kSpace);
  EXPECT_EQ(unicode_class('\''), kOther);
  EXPECT_EQ(unicode_class(0x1C), kOther);      // a separator control: isspace() but not \s
  EXPECT_EQ(unicode_class(0x85), kSpace);      // NEXT LINE
  EXPECT_EQ(unicode_class(0xA0), kSpace);      // NO-BREAK SPACE
  EXPECT_EQ(unicode_class(0xAA), kLetter);     // FEMININE ORDINAL INDICATOR (Lo)
  EXPECT_EQ(unicode_class(0xAD), kOther);      // SOFT HYPHEN (Cf)
  EXPECT_EQ(unicode_class(0xBD), kNumber);     // VULGAR FRACTION ONE HALF (No)
  EXPECT_EQ(unicode_class(0xE9), kLetter);     // é
  EXPECT_EQ(unicode_class(0x301), kOther);     // COMBINING ACUTE ACCENT (Mn)
  EXPECT_EQ(unicode_class(0x663), kNumber);    // ARABIC-INDIC DIGIT THREE
  EXPECT_EQ(unicode_class(0x16EE), kNumber);   // RUNIC ARLAUG SYMBOL (Nl)
  EXPECT_EQ(unicode_class(0x180E), kOther);    // MONGOLIAN VOWEL SEPARATOR: not \s since 6.3
  EXPECT_EQ(unicode_class(0x2028), kSpace);    // LINE SEPARATOR
  EXPECT_EQ(unicode_class(0x200B), kOther);    // ZERO WIDTH SPACE (Cf), not White_Space
  EXPECT_EQ(unicode_class(0x3000), kSpace);    // IDEOGRAPHIC SPACE
  EXPECT_EQ(unicode_class(0x4E16), kLetter);   // 世
  EXPECT_EQ(unicode_class(0xFEFF), kOther);    // BOM
  EXPECT_EQ(unicode_class(0x1F600), kOther);   // 😀 (So)
  EXPECT_EQ(unicode_class(0x20000), kLetter);  // CJK extension B, first
  EXPECT_EQ(unicode_class(0x2A6DF), kLetter);  // CJK extension B, last in Unicode 14
  EXPECT_EQ(unicode_class(0x10FFFF), kOther);
  EXPECT_EQ(unicode_class(0x110000), kOther);
}

TEST(ReadChar, ValidSequencesSpanTheirBytes) {
  auto read = [](std::string_view s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    return read_char(p, p + s.size());
  };
  EXPECT_EQ(read("a").size_bytes, 1u);
  EXPECT_EQ(read("\xc3\xa9").size_bytes, 2u);
  EXPECT_EQ(read("\xc3\xa9").char_class, kLetter);
  EXPECT_EQ(read("\xe4\xb8\x96").size_bytes, 3u);
  EXPECT_EQ(read("\xef\xbf\xbf").size_bytes, 3u);  // U+FFFF, a noncharacter but well-formed
  EXPECT_EQ(read("\xf0\x9f\x98\x80").size_bytes, 4u);
  EXPECT_EQ(read("\xf4\x8f\xbf\xbf").size_bytes, 4u);  // U+10FFFF
  for (std::string_view invalid :
       {"\x80", "\xbf", "\xc0\x80", "\xc1\xbf", "\xc3",
        "\xc3"
        "a",
        "\xe0\x80\x80", "\xe0\x9f\xbf", "\xed\xa0\x80", "\xe4\xb8", "\xf0\x80\x80\x80",
        "\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "\xf0\x9f\x98"}) {
    const Char c = read(invalid);
    EXPECT_EQ(c.size_bytes, 1u) << "first byte " << static_cast<int>(invalid[0] & 0xFF);
    EXPECT_EQ(c.char_class, kOther);
  }
}

}  // namespace
}  // namespace kiln::train::tok
