#include <kiln/sched/auth.h>

#include <gtest/gtest.h>

namespace kiln::sched {
namespace {

TEST(AuthTest, Sha256IsTheStandardDigest) {
  // FIPS 180-2 test vector.
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(AuthTest, NewTokensAreLongAndDifferent) {
  Result<std::string> a = new_token();
  Result<std::string> b = new_token();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_NE(*a, *b);
}

TEST(AuthTest, TokensMapToTheirTeamAndOnlyHashesAreKept) {
  const std::string text = TokenRegistry::render(
      {{"alice", "vision", false, sha256_hex("tok-a")}, {"ops", "ops", true, sha256_hex("tok-o")}},
      sha256_hex("tok-n"), {{"vision", "alice"}});
  EXPECT_EQ(text.find("tok-a"), std::string::npos);  // the file never holds a token
  Result<TokenRegistry> r = TokenRegistry::parse(text, "auth.yaml");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::optional<Caller> alice = r->caller_for("tok-a");
  ASSERT_TRUE(alice.has_value());
  EXPECT_EQ(alice->name, "alice");
  EXPECT_EQ(alice->team, "vision");
  EXPECT_FALSE(alice->admin);
  EXPECT_TRUE(r->caller_for("tok-o")->admin);
  EXPECT_FALSE(r->caller_for("tok-x").has_value());
  EXPECT_FALSE(r->caller_for("").has_value());
  EXPECT_FALSE(r->caller_for("tok-n").has_value());  // the node token is no user's
  EXPECT_TRUE(r->is_node_token("tok-n"));
  EXPECT_FALSE(r->is_node_token("tok-a"));
  EXPECT_EQ(r->unix_user_of("vision"), "alice");
  EXPECT_EQ(r->unix_user_of("ops"), "");
}

TEST(AuthTest, AMalformedFileNamesTheLineAndKey) {
  Result<TokenRegistry> r =
      TokenRegistry::parse("tokens:\n  alice: {team: t, sha256: nothex}\n", "auth.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("auth.yaml:2"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("sha256"), std::string::npos);
  r = TokenRegistry::parse(
      "tokens:\n  alice: {team: t, sha256: " + sha256_hex("x") + ", admn: true}\n", "auth.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("admn"), std::string::npos) << r.status().message();
  EXPECT_FALSE(TokenRegistry::parse("node_token_sha256: 00\n", "auth.yaml").ok());  // no tokens
}

}  // namespace
}  // namespace kiln::sched
