#include <kiln/sched/duration.h>

#include <gtest/gtest.h>

#include <string>

namespace kiln::sched {
namespace {

int64_t ms(std::string_view text) {
  Result<int64_t> r = parse_duration_ms(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().to_string();
  return r.ok() ? *r : -1;
}

// The message of a refused text; it always quotes the text.
std::string error(std::string_view text) {
  Result<int64_t> r = parse_duration_ms(text);
  EXPECT_FALSE(r.ok()) << text << " parsed as " << (r.ok() ? *r : 0);
  if (r.ok()) return "";
  EXPECT_TRUE(r.status().is_invalid_argument());
  EXPECT_NE(r.status().message().find("\"" + std::string(text) + "\""), std::string::npos)
      << r.status().message();
  return r.status().message();
}

TEST(DurationTest, Units) {
  EXPECT_EQ(ms("500ms"), 500);
  EXPECT_EQ(ms("2s"), 2000);
  EXPECT_EQ(ms("5m"), 300'000);
  EXPECT_EQ(ms("1h"), 3'600'000);
  EXPECT_EQ(ms("0s"), 0);
  EXPECT_EQ(ms("007s"), 7000);
}

TEST(DurationTest, FractionsAreExact) {
  EXPECT_EQ(ms("1.5s"), 1500);
  EXPECT_EQ(ms("0.1s"), 100);
  EXPECT_EQ(ms("0.001s"), 1);
  EXPECT_EQ(ms("1.25m"), 75'000);
  EXPECT_EQ(ms("0.5h"), 1'800'000);
  EXPECT_EQ(ms("2.000000000000s"), 2000);  // trailing zeros are not precision
  EXPECT_NE(error("1.5ms").find("finer than a millisecond"), std::string::npos);
  EXPECT_NE(error("0.0001s").find("finer than a millisecond"), std::string::npos);
  EXPECT_NE(error("1.0000000001h").find("finer than a millisecond"), std::string::npos);
  EXPECT_NE(error("1.s").find("no digits after the decimal point"), std::string::npos);
}

TEST(DurationTest, OverflowAndTheBound) {
  EXPECT_EQ(ms("8760h"), kDurationMsMax);
  EXPECT_NE(error("8761h").find("longer than"), std::string::npos);
  EXPECT_NE(error("99999999999999999999999999h").find("longer than"), std::string::npos);
  EXPECT_NE(error("9223372036854775807ms").find("longer than"), std::string::npos);
  EXPECT_NE(error("9223372036854775808.5s").find("longer than"), std::string::npos);
}

TEST(DurationTest, EmptyNegativeAndMalformed) {
  EXPECT_NE(error("").find("empty"), std::string::npos);
  EXPECT_NE(error("-1s").find("negative"), std::string::npos);
  EXPECT_NE(error("60").find("no unit"), std::string::npos);
  EXPECT_NE(error("5 parsecs").find("unknown unit \" parsecs\""), std::string::npos);
  EXPECT_NE(error("5parsecs").find("unknown unit \"parsecs\""), std::string::npos);
  EXPECT_NE(error("s").find("does not start with a number"), std::string::npos);
  EXPECT_NE(error(".5s").find("does not start with a number"), std::string::npos);
  error("1s ");
  error(" 1s");
  error("1S");
  error("1sec");
  error("1h30m");  // one number, one unit
}

}  // namespace
}  // namespace kiln::sched
