#include <kiln/sched/job_spec.h>

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "base/testing/temp_path.h"

namespace kiln::sched {
namespace {

// The example of job_spec.h's top comment, key for key.
constexpr const char* kExample = R"(name: tiny-2nodes
config: configs/tiny.yaml
nodes: 2
min_nodes: 1
ranks_per_node: 1
resources: {cpus: 1, memory: 2GiB, gpus: 0}
queue: default
priority: 0
env:
  PLAIN: value
  API_KEY: {value: s3cret, secret: true}
checkpoint: {dir: ckpt/tiny, every: 10}
max_restarts: 3
restart_backoff: 1s
restart_backoff_max: 2m
progress_timeout: 60s
start_timeout: 10m
preflight: quick
)";

// The message of a spec that must be refused.
std::string error_of(const std::string& yaml) {
  Result<JobSpec> spec = parse_job_spec(yaml, "job.yaml");
  EXPECT_FALSE(spec.ok()) << yaml;
  if (spec.ok()) return "";
  EXPECT_TRUE(spec.status().is_invalid_argument());
  return spec.status().message();
}

// "name: j\nconfig: c.yaml\n" plus `more`: a valid spec with one thing changed.
std::string with(const std::string& more) {
  return "name: j\nconfig: c.yaml\n" + more;
}

TEST(JobSpecTest, TheDocumentedExampleParses) {
  Result<JobSpec> spec = parse_job_spec(kExample, "tiny.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->name, "tiny-2nodes");
  EXPECT_EQ(spec->config, "configs/tiny.yaml");
  EXPECT_EQ(spec->command, (std::vector<std::string>{"kiln", "train", "configs/tiny.yaml"}));
  EXPECT_EQ(spec->nodes, 2);
  EXPECT_EQ(spec->min_nodes, 1);
  EXPECT_EQ(spec->effective_min_nodes(), 1);
  EXPECT_EQ(spec->ranks_per_node, 1);
  EXPECT_EQ(spec->resources.cpus, 1);
  EXPECT_EQ(spec->resources.memory_bytes, int64_t{2} << 30);
  EXPECT_EQ(spec->resources.gpus, 0);
  EXPECT_EQ(spec->queue, "default");
  EXPECT_EQ(spec->priority, 0);
  ASSERT_EQ(spec->env.size(), 2u);
  EXPECT_EQ(spec->env[0].name, "PLAIN");
  EXPECT_EQ(spec->env[0].value, "value");
  EXPECT_FALSE(spec->env[0].secret);
  EXPECT_EQ(spec->env[1].name, "API_KEY");
  EXPECT_EQ(spec->env[1].value, "s3cret");
  EXPECT_TRUE(spec->env[1].secret);
  EXPECT_EQ(spec->checkpoint_dir, "ckpt/tiny");
  EXPECT_EQ(spec->checkpoint_every, 10);
  EXPECT_EQ(spec->max_restarts, 3);
  EXPECT_EQ(spec->restart_backoff_ms, 1000);
  EXPECT_EQ(spec->restart_backoff_max_ms, 120'000);
  EXPECT_EQ(spec->progress_timeout_ms, 60'000);
  EXPECT_EQ(spec->start_timeout_ms, 600'000);
  EXPECT_EQ(spec->preflight, PreflightLevel::kQuick);
}

TEST(JobSpecTest, DefaultsAndAnExplicitCommand) {
  Result<JobSpec> spec = parse_job_spec(
      "name: x\ncommand: [kiln, train, c.yaml, --max-steps, \"40\"]\nresources: {memory: 1000}\n",
      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->command,
            (std::vector<std::string>{"kiln", "train", "c.yaml", "--max-steps", "40"}));
  EXPECT_EQ(spec->config, "");
  EXPECT_EQ(spec->nodes, 1);
  EXPECT_EQ(spec->effective_min_nodes(), 1);
  EXPECT_EQ(spec->resources.memory_bytes, 1000);
  EXPECT_EQ(spec->max_restarts, 3);
  EXPECT_EQ(spec->progress_timeout_ms, 300'000);
  EXPECT_EQ(spec->preflight, PreflightLevel::kNone);
  EXPECT_EQ(preflight_level_name(PreflightLevel::kFull), "full");
}

TEST(JobSpecTest, MemorySizes) {
  const std::pair<const char*, int64_t> cases[] = {{"0", 0},
                                                   {"512MiB", int64_t{512} << 20},
                                                   {"3KB", 3000},
                                                   {"1TiB", int64_t{1} << 40},
                                                   {"\"2GB\"", 2'000'000'000}};
  for (const auto& [text, bytes] : cases) {
    Result<JobSpec> spec =
        parse_job_spec(with(std::string("resources: {memory: ") + text + "}\n"), "j");
    ASSERT_TRUE(spec.ok()) << text << ": " << spec.status().to_string();
    EXPECT_EQ(spec->resources.memory_bytes, bytes) << text;
  }
}

TEST(JobSpecTest, UnknownKeyNamesFileLineAndSuggestion) {
  const std::string message = error_of(with("nodes: 2\nmax_restart: 4\n"));
  EXPECT_NE(message.find("job.yaml:4:"), std::string::npos) << message;
  EXPECT_NE(message.find("key 'max_restart': unknown key; did you mean 'max_restarts'?"),
            std::string::npos)
      << message;
  const std::string nested = error_of(with("resources: {cpus: 2, gpu: 1}\n"));
  EXPECT_NE(nested.find("job.yaml:3:"), std::string::npos) << nested;
  EXPECT_NE(nested.find("key 'resources.gpu': unknown key; did you mean 'gpus'?"),
            std::string::npos)
      << nested;
}

TEST(JobSpecTest, WrongTypesAndRanges) {
  std::string m = error_of(with("nodes: two\n"));
  EXPECT_NE(m.find("job.yaml:3:8: key 'nodes': expected an integer"), std::string::npos) << m;
  m = error_of(with("env: [A, B]\n"));
  EXPECT_NE(m.find("key 'env': expected a mapping"), std::string::npos) << m;
  m = error_of(with("ranks_per_node: 0\n"));
  EXPECT_NE(m.find("key 'ranks_per_node': 0 is out of range [1, 1024]"), std::string::npos) << m;
  m = error_of(with("priority: 1001\n"));
  EXPECT_NE(m.find("key 'priority': 1001 is out of range [-1000, 1000]"), std::string::npos) << m;
  m = error_of(with("max_restarts: -1\n"));
  EXPECT_NE(m.find("key 'max_restarts'"), std::string::npos) << m;
  m = error_of(with("preflight: sometimes\n"));
  EXPECT_NE(m.find("key 'preflight': expected one of none, quick, full"), std::string::npos) << m;
  m = error_of(with("env: {A: {value: x, secret: maybe}}\n"));
  EXPECT_NE(m.find("key 'env.A.secret': expected true or false"), std::string::npos) << m;
}

TEST(JobSpecTest, MinNodesAboveNodes) {
  const std::string m = error_of(with("nodes: 2\nmin_nodes: 3\n"));
  EXPECT_NE(m.find("job.yaml:4:12: key 'min_nodes': min_nodes 3 is more than nodes 2"),
            std::string::npos)
      << m;
}

TEST(JobSpecTest, EnvNames) {
  std::string m = error_of(with("env:\n  OK: 1\n  KILN_RANK: \"3\"\n"));
  EXPECT_NE(m.find("job.yaml:5:14: key 'env.KILN_RANK': 'KILN_RANK' is reserved"),
            std::string::npos)
      << m;
  m = error_of(with("env: {9LIVES: x}\n"));
  EXPECT_NE(m.find("key 'env.9LIVES': '9LIVES' is not a valid environment variable name"),
            std::string::npos)
      << m;
  m = error_of(with("env: {A-B: x}\n"));
  EXPECT_NE(m.find("key 'env.A-B'"), std::string::npos) << m;
  m = error_of(with("env: {A: x, A: y}\n"));
  EXPECT_NE(m.find("key 'env.A': duplicate key"), std::string::npos) << m;
  m = error_of(with("env: {A: {secret: true}}\n"));
  EXPECT_NE(m.find("key 'env.A.value': required key is missing"), std::string::npos) << m;
}

TEST(JobSpecTest, NameIsRequiredAndPlain) {
  std::string m = error_of("config: c.yaml\n");
  EXPECT_NE(m.find("job.yaml:1:1: key 'name': required key is missing"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << "one problem, one line: " << m;
  m = error_of("name: a/b\nconfig: c.yaml\n");
  EXPECT_NE(m.find("key 'name': 'a/b' must be 1..64 characters"), std::string::npos) << m;
  m = error_of("name: " + std::string(65, 'a') + "\nconfig: c.yaml\n");
  EXPECT_NE(m.find("key 'name': must be 1..64"), std::string::npos) << m;
  m = error_of("name: .hidden\nconfig: c.yaml\n");
  EXPECT_NE(m.find("key 'name'"), std::string::npos) << m;
}

TEST(JobSpecTest, NeitherCommandNorConfig) {
  std::string m = error_of("name: j\nnodes: 1\n");
  EXPECT_NE(m.find("job.yaml:1:1: key 'config': neither command nor config is set"),
            std::string::npos)
      << m;
  m = error_of("name: j\ncommand: []\n");
  EXPECT_NE(m.find("key 'command': must not be empty"), std::string::npos) << m;
}

TEST(JobSpecTest, BadDurationAndMemoryNameTheKey) {
  std::string m = error_of(with("progress_timeout: 5 parsecs\n"));
  EXPECT_NE(m.find("job.yaml:3:19: key 'progress_timeout': duration \"5 parsecs\": unknown unit"),
            std::string::npos)
      << m;
  m = error_of(with("start_timeout: 0s\n"));
  EXPECT_NE(m.find("key 'start_timeout': must be at least 1 ms"), std::string::npos) << m;
  m = error_of(with("restart_backoff: 60\n"));
  EXPECT_NE(m.find("key 'restart_backoff': duration \"60\": no unit"), std::string::npos) << m;
  m = error_of(with("restart_backoff: 2m\n"));  // above the default maximum of 60 s
  EXPECT_NE(m.find("key 'restart_backoff': restart_backoff (120000 ms) is more than"),
            std::string::npos)
      << m;
  m = error_of(with("resources: {memory: 2 gigs}\n"));
  EXPECT_NE(m.find("job.yaml:3:21: key 'resources.memory': \"2 gigs\" is not a size"),
            std::string::npos)
      << m;
  m = error_of(with("resources: {memory: 99999999999TiB}\n"));
  EXPECT_NE(m.find("key 'resources.memory': \"99999999999TiB\" is more bytes than int64 holds"),
            std::string::npos)
      << m;
  m = error_of(with("resources: {memory: -1}\n"));
  EXPECT_NE(m.find("key 'resources.memory'"), std::string::npos) << m;
}

TEST(JobSpecTest, EveryProblemIsReportedSortedByLine) {
  const std::string m = error_of("name: j\nnodes: 0\nenv: {KILN_X: y}\npreflight: no\n");
  EXPECT_NE(m.find("job.yaml:1:1: key 'config'"), std::string::npos) << m;
  EXPECT_LT(m.find("key 'nodes'"), m.find("key 'env.KILN_X'")) << m;
  EXPECT_LT(m.find("key 'env.KILN_X'"), m.find("key 'preflight'")) << m;
}

TEST(JobSpecTest, LoadJobSpecNamesThePath) {
  const std::string path = kiln::testing::unique_temp_path("job.yaml");
  std::ofstream(path) << "name: j\nconfig: c.yaml\nnodes: lots\n";
  Result<JobSpec> spec = load_job_spec(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find(path + ":3:8: key 'nodes'"), std::string::npos)
      << spec.status().message();
  std::ofstream(path) << kExample;
  EXPECT_TRUE(load_job_spec(path).ok());
  std::remove(path.c_str());
  EXPECT_TRUE(load_job_spec(path).status().is_not_found());
}

TEST(JobSpecJsonTest, RoundTripWithSecrets) {
  Result<JobSpec> spec = parse_job_spec(kExample, "tiny.yaml");
  ASSERT_TRUE(spec.ok());
  const nlohmann::json json = job_spec_to_json(*spec, /*with_secrets=*/true);
  Result<JobSpec> back = job_spec_from_json(nlohmann::json::parse(json.dump()));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(job_spec_to_json(*back, true), json);
  EXPECT_EQ(back->env[1].value, "s3cret");
  EXPECT_TRUE(back->env[1].secret);
  EXPECT_EQ(back->restart_backoff_max_ms, 120'000);
  EXPECT_EQ(back->preflight, PreflightLevel::kQuick);
}

TEST(JobSpecJsonTest, WithoutSecretsNoSecretValueAnywhere) {
  Result<JobSpec> spec = parse_job_spec(kExample, "tiny.yaml");
  ASSERT_TRUE(spec.ok());
  const std::string text = job_spec_to_json(*spec, /*with_secrets=*/false).dump();
  EXPECT_EQ(text.find("s3cret"), std::string::npos) << text;
  EXPECT_NE(text.find("\"API_KEY\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"value\""), std::string::npos) << "PLAIN keeps its value: " << text;
  Result<JobSpec> back = job_spec_from_json(nlohmann::json::parse(text));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(back->env[1].secret);
  EXPECT_EQ(back->env[1].value, "");
  EXPECT_EQ(back->env[0].value, "value");
}

TEST(JobSpecJsonTest, ErrorsNameTheField) {
  auto message = [](const nlohmann::json& json) {
    Result<JobSpec> spec = job_spec_from_json(json);
    EXPECT_FALSE(spec.ok()) << json.dump();
    return spec.ok() ? std::string() : spec.status().message();
  };
  nlohmann::json good = {{"name", "j"}, {"config", "c.yaml"}};
  ASSERT_TRUE(job_spec_from_json(good).ok());
  EXPECT_EQ(message(nlohmann::json::array()), "job spec: expected a JSON object, got array");
  EXPECT_NE(message({{"config", "c"}}).find("field 'name': required field is missing"),
            std::string::npos);
  nlohmann::json j = good;
  j["nodes"] = "2";
  EXPECT_NE(message(j).find("field 'nodes': expected an integer, got string"), std::string::npos);
  j = good;
  j["resources"] = {{"cpus", 0}};
  EXPECT_NE(message(j).find("field 'resources.cpus': 0 is out of range [1, 1024]"),
            std::string::npos);
  j = good;
  j["resources"] = {{"memory_bytes", 18446744073709551615ULL}};
  EXPECT_NE(message(j).find("field 'resources.memory_bytes'"), std::string::npos);
  j = good;
  j["colour"] = "blue";
  EXPECT_NE(message(j).find("field 'colour': unknown field"), std::string::npos);
  j = good;
  j["env"] = {{{"name", "KILN_RANK"}, {"value", "1"}}};
  EXPECT_NE(message(j).find("field 'env[0].name': 'KILN_RANK' is reserved"), std::string::npos);
  j = good;
  j["env"] = {{{"name", "A"}}, {{"name", "A"}}};
  EXPECT_NE(message(j).find("field 'env[1].name': 'A' appears twice"), std::string::npos);
  j = good;
  j["min_nodes"] = 2;
  EXPECT_NE(message(j).find("field 'min_nodes': min_nodes 2 is more than nodes 1"),
            std::string::npos);
  EXPECT_NE(message({{"name", "j"}}).find("field 'config': neither command nor config"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::sched
