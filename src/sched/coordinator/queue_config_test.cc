// `kiln serve --queues`: the file users write, and its errors.
#include <kiln/sched/queue_config.h>

#include <gtest/gtest.h>

namespace kiln::sched {
namespace {

TEST(QueueConfigTest, ReadsQueuesQuotasAndBorrowing) {
  auto q = parse_queue_config(R"(queues:
  research:
    team: ml
    cohort: main
    weight: 3
    quota: {default: {nodes: 2, gpus: 16}}
    borrow: {default: {nodes: 2}}
  ops:
    cohort: main
)",
                              "queues.yaml");
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  ASSERT_EQ(q->size(), 2u);
  const QueueSpec& r = (*q)[0];
  EXPECT_EQ(r.name, "research");
  EXPECT_EQ(r.team, "ml");
  EXPECT_EQ(r.weight, 3);
  EXPECT_EQ(r.quota.at("default").nodes, 2);
  EXPECT_EQ(r.quota.at("default").cpus, -1);  // not named: unlimited
  EXPECT_EQ(r.borrow.at("default").nodes, 2);
  EXPECT_EQ(r.borrow.at("default").gpus, 0);  // not named: no borrowing
  EXPECT_EQ((*q)[1].team, "ops");
  EXPECT_TRUE((*q)[1].quota.empty());
}

TEST(QueueConfigTest, ErrorsNameTheFileLineAndKey) {
  const struct {
    const char* yaml;
    const char* want;
  } cases[] = {
      {"queues:\n  a:\n    wieght: 3\n", "queues.yaml:3"},
      {"queues:\n  a:\n    weight: 0\n", "weight"},
      {"queues:\n  a:\n    borrow: {default: {nodes: 1}}\n", "needs a cohort"},
      {"queues:\n  a:\n    quota: {default: {nodes: -1}}\n", "nodes"},
      {"queues:\n  'a b': {}\n", "not a plain name"},
      {"other: 1\n", "queues"},
      {"queues:\n  a: {team: t, weight: 2}\n  b: {team: t, weight: 3}\n",
       "one team has one weight"},
  };
  for (const auto& c : cases) {
    auto q = parse_queue_config(c.yaml, "queues.yaml");
    ASSERT_FALSE(q.ok()) << c.yaml;
    EXPECT_NE(q.status().message().find(c.want), std::string::npos) << q.status().message();
  }
}

}  // namespace
}  // namespace kiln::sched
