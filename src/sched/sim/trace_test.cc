// The simulator's CSV readers: what they accept, and that every bad input names file:line:column.
#include <kiln/sched/sim.h>

#include <gtest/gtest.h>

namespace kiln::sched {
namespace {

const char* kNodesHeader = "name,cpus,memory_mib,gpus,gpu_model,domain\n";
const char* kJobsHeader =
    "name,submit_s,duration_s,time_limit_s,nodes,cpus_per_node,memory_mib_per_node,"
    "gpus_per_node,gpu_model,queue,priority\n";

std::string error_of(const Status& s) {
  return s.message();
}

TEST(TraceTest, ReadsNodesJobsAndQueues) {
  auto nodes = parse_nodes_csv(std::string(kNodesHeader) +
                                   "n1,96,1024,8,A100,r1/s3\n"
                                   "n2,64,512,0,,\r\n",
                               "nodes.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status().to_string();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].domain, (std::vector<std::string>{"r1", "s3"}));
  EXPECT_EQ((*nodes)[0].capacity.memory_bytes, int64_t{1024} << 20);
  EXPECT_TRUE((*nodes)[1].domain.empty());

  auto jobs = parse_jobs_csv(std::string(kJobsHeader) +
                                 "j1,0,100,200,2,16,1000,8,A100|H100,team-a,10\n"
                                 "j2,5.5,1,2,1,1,0,0,,,\n",
                             "jobs.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status().to_string();
  EXPECT_EQ((*jobs)[0].job.gpu_models, (std::vector<std::string>{"A100", "H100"}));
  EXPECT_EQ((*jobs)[0].job.priority, 10);
  EXPECT_EQ((*jobs)[1].job.queue, "default");
  EXPECT_EQ((*jobs)[1].job.priority, 0);
  EXPECT_EQ((*jobs)[1].job.submit_s, 5.5);

  auto queues = parse_queues_csv(
      "name,team,cohort,weight,quota_nodes,quota_cpus,quota_gpus,borrow_nodes,borrow_cpus,"
      "borrow_gpus\nq,t,c,2,,,16,,,8\n",
      "queues.csv");
  ASSERT_TRUE(queues.ok()) << queues.status().to_string();
  EXPECT_EQ((*queues)[0].quota.at("default").gpus, 16);
  EXPECT_EQ((*queues)[0].quota.at("default").nodes, -1);
  EXPECT_EQ((*queues)[0].borrow.at("default").gpus, 8);
  EXPECT_EQ((*queues)[0].borrow.at("default").nodes, 0);
}

TEST(TraceTest, EveryBadInputNamesTheFileLineAndColumn) {
  struct Case {
    std::string nodes_body;
    std::string want;
  };
  const Case node_cases[] = {
      {"n1,96,1024,8,A100,r1/s3,extra\n", "nodes.csv:2: 7 field(s), the header has 6 (extra"},
      {"n1,ninety,1024,8,A100,\n", "nodes.csv:2: column 'cpus': 'ninety' is not an integer"},
      {"n1,96,1024,8,,\n", "nodes.csv:2: column 'gpu_model': is empty but the node has GPUs"},
      {"n1,96,1024,8,A100,\nn1,96,1024,8,A100,\n", "nodes.csv:3: column 'name': node n1 appears"},
      {"n1,-1,1024,8,A100,\n", "nodes.csv:2: column 'cpus': -1 is outside"},
      {"n1,96,1024,8,A100,r1//s\n", "nodes.csv:2: column 'domain'"},
  };
  for (const Case& c : node_cases) {
    auto r = parse_nodes_csv(std::string(kNodesHeader) + c.nodes_body, "nodes.csv");
    ASSERT_FALSE(r.ok()) << c.nodes_body;
    EXPECT_NE(error_of(r.status()).find(c.want), std::string::npos) << error_of(r.status());
  }
  auto header = parse_nodes_csv("name,cpus,memory_mib,gpus,gpu_model,domain,rack\n", "n.csv");
  ASSERT_FALSE(header.ok());
  EXPECT_NE(error_of(header.status()).find("n.csv:1: header is"), std::string::npos);
  EXPECT_FALSE(parse_nodes_csv(kNodesHeader, "n.csv").ok());  // no nodes

  const Case job_cases[] = {
      {"j,0,0,10,1,1,0,0,,,\n", "jobs.csv:2: column 'duration_s': must be positive"},
      {"j,0,10,10,0,1,0,0,,,\n", "jobs.csv:2: column 'nodes': 0 is outside"},
      {"j,0,10,nan,1,1,0,0,,,\n", "jobs.csv:2: column 'time_limit_s': 'nan' is not a number"},
      {"j,0,10,10,1,1,0,0,A||B,,\n", "jobs.csv:2: column 'gpu_model'"},
      {"j,0,10,10,1,1,0,0,,,1.5\n", "jobs.csv:2: column 'priority': '1.5' is not an integer"},
      {"j,0,10,10,1,1,0,0,,a b,\n", "jobs.csv:2: column 'queue'"},
      {"j,0,10,10,1,1,0,0,,\n", "jobs.csv:2: 10 field(s), the header has 11"},
  };
  for (const Case& c : job_cases) {
    auto r = parse_jobs_csv(std::string(kJobsHeader) + c.nodes_body, "jobs.csv");
    ASSERT_FALSE(r.ok()) << c.nodes_body;
    EXPECT_NE(error_of(r.status()).find(c.want), std::string::npos) << error_of(r.status());
  }
}

TEST(TraceTest, LoadTraceNamesMissingFilesAndUnknownQueues) {
  auto missing = load_trace("/nonexistent/nodes.csv", "/nonexistent/jobs.csv", "");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(error_of(missing.status()).find("/nonexistent/nodes.csv"), std::string::npos);
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + "/" + name;
    FILE* f = fopen(path.c_str(), "w");
    fputs(text.c_str(), f);
    fclose(f);
    return path;
  };
  const std::string nodes = write("n.csv", std::string(kNodesHeader) + "n1,8,64,0,,\n");
  const std::string jobs = write("j.csv", std::string(kJobsHeader) + "j,0,10,10,1,1,0,0,,zz,\n");
  const std::string queues =
      write("q.csv",
            "name,team,cohort,weight,quota_nodes,quota_cpus,quota_gpus,borrow_nodes,borrow_cpus,"
            "borrow_gpus\nq,,,,,,,,,\n");
  auto unknown = load_trace(nodes, jobs, queues);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(error_of(unknown.status()).find("job j names queue 'zz'"), std::string::npos)
      << error_of(unknown.status());
  EXPECT_TRUE(load_trace(nodes, jobs, "").ok());
}

}  // namespace
}  // namespace kiln::sched
