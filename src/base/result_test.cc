#include <kiln/base/result.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace kiln {
namespace {

Result<int> parse_port(const std::string& text) {
  if (text.empty()) return Status::invalid_argument("port: empty");
  return std::stoi(text);
}

Result<std::string> endpoint(const std::string& host, const std::string& port_text) {
  KILN_ASSIGN_OR_RETURN(int port, parse_port(port_text));
  return host + ":" + std::to_string(port);
}

Status check_endpoint(const std::string& port_text) {
  KILN_ASSIGN_OR_RETURN(std::string endpoint, endpoint("h", port_text));
  return endpoint.empty() ? Status::aborted("empty") : Status();
}

TEST(ResultTest, HoldsAValue) {
  Result<int> r = parse_port("8080");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 8080);
  EXPECT_EQ(r.value(), 8080);
  EXPECT_TRUE(r.status().ok());
}

TEST(ResultTest, HoldsAnError) {
  Result<int> r = parse_port("");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().is_invalid_argument());
  EXPECT_EQ(r.status().message(), "port: empty");
  EXPECT_EQ(r.value_or(7), 7);
}

TEST(ResultTest, AssignOrReturnPropagatesErrorsToResultAndStatus) {
  Result<std::string> ok = endpoint("node1", "29500");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "node1:29500");
  Result<std::string> bad = endpoint("node1", "");
  EXPECT_TRUE(bad.status().is_invalid_argument());
  EXPECT_TRUE(check_endpoint("").is_invalid_argument());
  EXPECT_TRUE(check_endpoint("1").ok());
}

TEST(ResultTest, WorksWithMoveOnlyTypes) {
  auto make = []() -> Result<std::unique_ptr<int>> { return std::make_unique<int>(5); };
  Result<std::unique_ptr<int>> r = make();
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
}

TEST(ResultDeathTest, ValueOfAnErrorIsAProgrammerError) {
  Result<int> r = Status::not_found("job 42");
  EXPECT_DEATH((void)r.value(), "Result has no value: NotFound: job 42");
}

TEST(ResultDeathTest, OkStatusIsNotAnError) {
  EXPECT_DEATH(Result<int>{Status()}, "Result constructed from an OK Status");
}

}  // namespace
}  // namespace kiln
