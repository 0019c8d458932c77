// Issue 10: kiln_comm's environment is parsed in one place with named errors. A bad KILN_COMM_ISA
// fails Communicator::create (it used to abort inside the first collective), and a host name
// that does not resolve is an error naming it (it used to advertise 127.0.0.1 silently) unless
// KILN_COMM_ADDR says which address to use.
#include "comm/comm_env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <kiln/base/log.h>
#include <kiln/comm/communicator.h>
#include <kiln/comm/store.h>

#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/mesh.h"

namespace kiln::comm {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// Sets a variable for the life of the object, then restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = std::string(old);
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A host name that resolves nowhere: .invalid is reserved for exactly this (RFC 2606).
constexpr const char* kUnresolvableHost = "kiln-test-host.invalid";

TEST(CommEnvTest, UnsetMeansDefaults) {
  Result<CommEnv> env = parse_comm_env(env_of({}), CpuIsa::kAvx2);
  ASSERT_TRUE(env.ok()) << env.status().to_string();
  EXPECT_FALSE(env->reduce_isa.has_value());
  EXPECT_EQ(env->tcp_address, "");
  env = parse_comm_env(env_of({{"KILN_COMM_ISA", ""}}), CpuIsa::kAvx2);
  ASSERT_TRUE(env.ok());
  EXPECT_FALSE(env->reduce_isa.has_value());
}

// Issue 11: where the machine profile is cached, or that none is used.
TEST(CommEnvTest, TheProfileIsCachedWhereTheEnvironmentSaysOrNowhereWhenOff) {
  Result<CommEnv> env = parse_comm_env(env_of({{"HOME", "/home/u"}}), CpuIsa::kAvx2);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->profile_path, "/home/u/.cache/kiln/machine-profile.json");
  env = parse_comm_env(env_of({{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "/c"}}), CpuIsa::kAvx2);
  EXPECT_EQ(env->profile_path, "/c/kiln/machine-profile.json");
  env = parse_comm_env(env_of({{"KILN_COMM_PROFILE", "/p/m.json"}}), CpuIsa::kAvx2);
  EXPECT_EQ(env->profile_path, "/p/m.json");
  env = parse_comm_env(env_of({{"KILN_COMM_PROFILE", "off"}}), CpuIsa::kAvx2);
  EXPECT_EQ(env->profile_path, "");
  env = parse_comm_env(env_of({{"KILN_COMM_PROFILE", "rel/m.json"}}), CpuIsa::kAvx2);
  EXPECT_EQ(env.status().message(),
            "KILN_COMM_PROFILE='rel/m.json' is neither 'off' nor an absolute path");
}

TEST(CommEnvTest, ReadsTheIsaAndTheAddress) {
  Result<CommEnv> env = parse_comm_env(
      env_of({{"KILN_COMM_ISA", "scalar"}, {"KILN_COMM_ADDR", "10.1.2.3"}}), CpuIsa::kAvx2);
  ASSERT_TRUE(env.ok()) << env.status().to_string();
  EXPECT_EQ(env->reduce_isa, CpuIsa::kScalar);
  EXPECT_EQ(env->tcp_address, "10.1.2.3");
}

TEST(CommEnvTest, ABadIsaNamesTheVariableAndTheAcceptedValues) {
  const Status unknown =
      parse_comm_env(env_of({{"KILN_COMM_ISA", "sse9"}}), CpuIsa::kAvx2).status();
  EXPECT_TRUE(unknown.is_invalid_argument()) << unknown.to_string();
  EXPECT_NE(unknown.message().find("KILN_COMM_ISA='sse9'"), std::string::npos);
  EXPECT_NE(unknown.message().find("scalar, avx2 and avx512"), std::string::npos);
  const Status higher =
      parse_comm_env(env_of({{"KILN_COMM_ISA", "avx512"}}), CpuIsa::kAvx2).status();
  EXPECT_TRUE(higher.is_not_supported()) << higher.to_string();
  EXPECT_NE(higher.message().find("KILN_COMM_ISA=avx512"), std::string::npos);
}

TEST(CommEnvTest, ReadsTheWaitOverridesAndNamesABadOne) {
  Result<CommEnv> env = parse_comm_env(
      env_of({{"KILN_COMM_SPIN_US", "50"}, {"KILN_COMM_YIELD_US", "0"}}), CpuIsa::kAvx2);
  ASSERT_TRUE(env.ok()) << env.status().to_string();
  EXPECT_EQ(env->spin_us, 50);
  EXPECT_EQ(env->yield_us, 0);
  env = parse_comm_env(env_of({}), CpuIsa::kAvx2);
  ASSERT_TRUE(env.ok());
  EXPECT_FALSE(env->spin_us.has_value());
  for (const char* bad : {"-1", "1.5", "1000001", "ten", "9999999999999999999999"}) {
    const Status s = parse_comm_env(env_of({{"KILN_COMM_SPIN_US", bad}}), CpuIsa::kAvx2).status();
    EXPECT_TRUE(s.is_invalid_argument()) << bad;
    EXPECT_EQ(s.message(), std::string("KILN_COMM_SPIN_US='") + bad +
                               "' is not a whole number of microseconds in [0, 1000000]");
  }
}

TEST(CommEnvTest, ABadIsaFailsCommunicatorCreationCleanly) {
  const ScopedEnv isa("KILN_COMM_ISA", "sse9");
  std::unique_ptr<Store> store = make_memory_store();
  CommOptions o;
  o.store_prefix = "comm-env-test/isa";
  Result<std::unique_ptr<Communicator>> c = Communicator::create(o, store.get(), Logger());
  ASSERT_FALSE(c.ok()) << "a bad KILN_COMM_ISA must fail creation, before any collective";
  EXPECT_TRUE(c.status().is_invalid_argument()) << c.status().to_string();
  EXPECT_NE(c.status().message().find("KILN_COMM_ISA='sse9'"), std::string::npos)
      << c.status().to_string();
}

TEST(CommEnvTest, AHostNameThatDoesNotResolveIsAnErrorNamingItAndTheFix) {
  Result<std::string> address = resolve_tcp_address("", kUnresolvableHost);
  ASSERT_FALSE(address.ok()) << "resolved to " << *address << " instead of failing";
  EXPECT_TRUE(address.status().is_invalid_argument());
  EXPECT_NE(address.status().message().find(std::string("'") + kUnresolvableHost + "'"),
            std::string::npos)
      << address.status().to_string();
  EXPECT_NE(address.status().message().find("KILN_COMM_ADDR"), std::string::npos);
  // An explicit address needs no name service.
  address = resolve_tcp_address("127.0.0.1", kUnresolvableHost);
  ASSERT_TRUE(address.ok()) << address.status().to_string();
  EXPECT_EQ(*address, "127.0.0.1");
}

// Two ranks on two fake hosts (so TCP between them) whose names do not resolve, built as
// threads; each rank's creation status.
std::vector<Status> create_two_ranks(const std::string& prefix, bool same_host) {
  std::unique_ptr<Store> store = make_memory_store();
  std::vector<Status> statuses(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CommOptions o;
      o.rank = r;
      o.world_size = 2;
      o.host = std::string(same_host ? "a" : (r == 0 ? "a" : "b")) + "." + kUnresolvableHost;
      o.job_token = "test-token";
      o.store_prefix = prefix;
      o.setup_timeout_ms = 20'000;
      statuses[r] = Communicator::create(o, store.get(), Logger()).status();
    });
  }
  for (std::thread& t : threads)
    t.join();
  return statuses;
}

TEST(CommEnvTest, RanksThatNeedTcpFailNamingTheirHostWhenItDoesNotResolve) {
  const ScopedEnv addr("KILN_COMM_ADDR", nullptr);
  const std::vector<Status> s = create_two_ranks("comm-env-test/unresolved", false);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(s[r].ok()) << "rank " << r;
    EXPECT_TRUE(s[r].is_invalid_argument()) << s[r].to_string();
    EXPECT_NE(s[r].message().find(kUnresolvableHost), std::string::npos) << s[r].to_string();
    EXPECT_NE(s[r].message().find("KILN_COMM_ADDR"), std::string::npos) << s[r].to_string();
  }
}

TEST(CommEnvTest, KilnCommAddrOverridesTheHostName) {
  const ScopedEnv addr("KILN_COMM_ADDR", "127.0.0.1");
  const std::vector<Status> s = create_two_ranks("comm-env-test/addr", false);
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(s[r].ok()) << "rank " << r << ": " << s[r].to_string();
}

TEST(CommEnvTest, RanksSharingMemoryNeedNoAddress) {
  const ScopedEnv addr("KILN_COMM_ADDR", nullptr);
  const std::vector<Status> s = create_two_ranks("comm-env-test/shm", true);
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(s[r].ok()) << "rank " << r << ": " << s[r].to_string();
}

}  // namespace
}  // namespace kiln::comm
