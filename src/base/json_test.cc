// Bounded JSON parsing: size and depth are refused before a tree is built, naming the input.
#include <kiln/base/json.h>

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kiln {
namespace {

using ::testing::HasSubstr;

constexpr JsonLimits kLimits{1 << 20, 8};

TEST(JsonBoundsTest, ParsesWhatFitsTheLimits) {
  Result<nlohmann::json> j = parse_json_bounded(R"({"a": [1, {"b": "[[[["}]})", kLimits, "x.json");
  ASSERT_TRUE(j.ok()) << j.status().to_string();
  EXPECT_EQ((*j)["a"][1]["b"], "[[[[");
  // Exactly depth_max levels pass.
  EXPECT_TRUE(check_json_bounds("[[[[[[[[]]]]]]]]", kLimits, "x").ok());
}

TEST(JsonBoundsTest, RefusesNestingDeeperThanTheLimitNamingTheInput) {
  // 200,000 levels: what overflowed the stack when a manifest's metadata was dumped.
  const std::string deep = std::string(200'000, '[') + std::string(200'000, ']');
  Result<nlohmann::ordered_json> j = parse_json_bounded<nlohmann::ordered_json>(
      deep, {1 << 20, 64}, "m.json", StatusCode::kCorruption);
  ASSERT_FALSE(j.ok());
  EXPECT_TRUE(j.status().is_corruption());
  EXPECT_THAT(j.status().message(), HasSubstr("m.json: JSON nested more than 64 levels deep"));
  EXPECT_THAT(j.status().message(), HasSubstr("at byte 64"));
  EXPECT_FALSE(check_json_bounds("[[[[[[[[[]]]]]]]]]", kLimits, "x").ok());
  EXPECT_FALSE(
      check_json_bounds(R"({"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":1}}}}}}}}})", kLimits, "x")
          .ok());
}

TEST(JsonBoundsTest, BracketsInStringsAndEscapesDoNotCount) {
  const std::string text = R"(["\"[[[[[[[[[[[[", "\\", "{{{{{{{{{{{{{"])";
  EXPECT_TRUE(check_json_bounds(text, kLimits, "x").ok());
  EXPECT_TRUE(parse_json_bounded(text, kLimits, "x").ok());
}

TEST(JsonBoundsTest, RefusesTooManyBytesAndBadSyntaxNamingTheInput) {
  const Status big = check_json_bounds(std::string(100, ' '), {99, 8}, "peer 3");
  EXPECT_TRUE(big.is_invalid_argument());
  EXPECT_THAT(big.message(), HasSubstr("peer 3: 100 bytes of JSON, more than the 99"));
  Result<nlohmann::json> bad = parse_json_bounded("[1, 2", kLimits, "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("x.json: not valid JSON"));
}

TEST(Utf8Text, InvalidBytesBecomeReplacementsAndTheCutKeepsCharactersWhole) {
  EXPECT_EQ(utf8_text("plain", 100), "plain");
  EXPECT_EQ(utf8_text("a\xff"
                      "b",
                      100),
            "a\xef\xbf\xbd"
            "b");  // U+FFFD
  // "é" is two bytes: a cut after its first byte drops it rather than split it.
  EXPECT_EQ(utf8_text("ab\xc3\xa9", 3), "ab");
  EXPECT_EQ(utf8_text("ab\xc3\xa9", 4), "ab\xc3\xa9");
  const std::string out = utf8_text(std::string(10, '\xff'), 10);
  EXPECT_LE(out.size(), 10u);
  EXPECT_NO_THROW((void)nlohmann::json(out).dump());
}

}  // namespace
}  // namespace kiln
