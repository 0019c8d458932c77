#include <gtest/gtest.h>

#include <kiln/sched/slurm.h>

namespace kiln::sched {
namespace {

using Names = std::vector<std::string>;

TEST(ExpandHostlist, ExpandsRangesListsAndPadding) {
  EXPECT_EQ(*expand_hostlist("n[1-3,5]"), (Names{"n1", "n2", "n3", "n5"}));
  EXPECT_EQ(*expand_hostlist("gpu07"), (Names{"gpu07"}));
  EXPECT_EQ(*expand_hostlist("a[01-02]b"), (Names{"a01b", "a02b"}));
  EXPECT_EQ(*expand_hostlist("n1,n[3-4],x"), (Names{"n1", "n3", "n4", "x"}));
  EXPECT_EQ(*expand_hostlist("r[1-2]n[1-2]"), (Names{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(*expand_hostlist("n[09-11]"), (Names{"n09", "n10", "n11"}));
  EXPECT_TRUE(expand_hostlist("")->empty());
}

TEST(ExpandHostlist, RefusesBadListsAndBoundsTheCount) {
  for (const char* bad : {"n[1-", "n1-3]", "n[3-1]", "n[a-b]", "n[[1-2]]", "n1,,n2", "n[1-2"}) {
    Result<Names> r = expand_hostlist(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().to_string();
  }
  Result<Names> huge = expand_hostlist("n[1-99999999]", 1000);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("more than 1000"), std::string::npos);
  EXPECT_FALSE(expand_hostlist("a[1-40]b[1-40]", 1000).ok());
}

// sinfo -N -h -o "%N|%T|%c|%m|%P|%G|%E" as Slurm 22.05 prints it (taken from scripts/slurm-local).
TEST(ParseSinfo, MapsStatesDrainsCapacitiesAndReasons) {
  const std::string text =
      "n1|idle|2|1|debug*|(null)|none\n"
      "n2|drained|2|1|debug*|(null)|kiln: cordoned: 3 faults | last: hung\n"
      "n3|down*|2|1|debug*|(null)|Not responding\n"
      "n4|mixed|64|515000|gpu|gpu:h200:8(S:0-1)|none\n"
      "n4|mixed|64|515000|other|gpu:h200:8(S:0-1)|none\n"
      "n5|draining|2|1|debug*|(null)|admin work\n"
      "n6|down|2|1|debug*|(null)|chaos\n";
  Result<std::vector<ExternalNode>> nodes = parse_sinfo(text);
  ASSERT_TRUE(nodes.ok()) << nodes.status().to_string();
  ASSERT_EQ(nodes->size(), 6u);  // n4 once, from its first partition
  const auto& n = *nodes;
  EXPECT_TRUE(n[0].responding);
  EXPECT_FALSE(n[0].drained);
  EXPECT_EQ(n[0].cpus, 2);
  EXPECT_EQ(n[0].memory_bytes, 0);  // RealMemory 1 = not configured
  EXPECT_EQ(n[0].partition, "debug");
  EXPECT_EQ(n[0].reason, "");
  EXPECT_TRUE(n[1].drained);
  EXPECT_EQ(n[1].reason, "kiln: cordoned: 3 faults | last: hung");
  EXPECT_FALSE(n[2].responding);
  EXPECT_EQ(n[2].reason, "Not responding");
  EXPECT_EQ(n[3].gpus, 8);
  EXPECT_EQ(n[3].memory_bytes, int64_t{515000} * 1024 * 1024);
  EXPECT_EQ(n[3].partition, "gpu");
  EXPECT_TRUE(n[4].drained);
  EXPECT_TRUE(n[4].responding);
  EXPECT_TRUE(n[5].responding);  // set down by an administrator, still answering
  EXPECT_TRUE(n[5].down);
  EXPECT_FALSE(n[0].down);
  EXPECT_FALSE(n[2].down);  // "down*": not responding is its own flag
}

TEST(ParseSinfo, NamesTheLineThatDoesNotParse) {
  Result<std::vector<ExternalNode>> r =
      parse_sinfo("n1|idle|2|1|debug|(null)|none\nn2|idle|two|1|d|x|none\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sinfo line 2"), std::string::npos) << r.status().to_string();
  EXPECT_FALSE(parse_sinfo("n1|idle|2\n").ok());
}

TEST(ParseSqueue, ReadsJobsWithAnyNameAndExpandsNodes) {
  const std::string text =
      "12|kiln.j-000001.0|RUNNING|None|n[1-2]\n"
      "13|kiln.j-000002.1|PENDING|ReqNodeNotAvail, UnavailableNodes:n[3-4]|\n"
      "14|odd|name|COMPLETED|None|n3\n";
  Result<std::vector<SlurmJob>> jobs = parse_squeue(text);
  ASSERT_TRUE(jobs.ok()) << jobs.status().to_string();
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].id, "12");
  EXPECT_EQ((*jobs)[0].name, "kiln.j-000001.0");
  EXPECT_EQ((*jobs)[0].nodes, (Names{"n1", "n2"}));
  EXPECT_EQ((*jobs)[0].reason, "");
  EXPECT_EQ((*jobs)[1].state, "PENDING");
  EXPECT_EQ((*jobs)[1].reason, "ReqNodeNotAvail, UnavailableNodes:n[3-4]");
  EXPECT_TRUE((*jobs)[1].nodes.empty());
  EXPECT_EQ((*jobs)[2].name, "odd|name");
  EXPECT_EQ((*jobs)[2].state, "COMPLETED");
  EXPECT_FALSE(parse_squeue("12|x|RUNNING\n").ok());
  EXPECT_FALSE(parse_squeue("12|x|RUNNING|None|n[1-\n").ok());
}

TEST(SlurmStates, EndsAreEnds) {
  for (const char* s :
       {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY"})
    EXPECT_TRUE(slurm_state_ended(s)) << s;
  for (const char* s : {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED"})
    EXPECT_FALSE(slurm_state_ended(s)) << s;
}

}  // namespace
}  // namespace kiln::sched
