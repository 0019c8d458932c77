// Tests of the error signatures read from fault events (error_signature.h).
#include "sched/coordinator/error_signature.h"

#include <gtest/gtest.h>

namespace kiln::sched {
namespace {

EventRecord fault(nlohmann::json detail) {
  EventRecord e;
  e.type = "fault";
  e.attempt = 1;
  e.detail = std::move(detail);
  return e;
}

TEST(ErrorSignature, AKilledRankIsNamedWithItsNodeSignalAndStep) {
  auto sig =
      error_signature(fault({{"cause", "rank_exit"},
                             {"rank", 3},
                             {"node", "n2"},
                             {"step", 120},
                             {"signal", 9},
                             {"reporter", 3},
                             {"message", "rank 3 (pid 7) was killed by signal 9 (SIGKILL)"}}));
  ASSERT_TRUE(sig.has_value());
  EXPECT_EQ(sig->kind, "signal");
  EXPECT_EQ(sig->text, "rank 3 on n2 killed by signal 9 (SIGKILL) at step 120");
  EXPECT_EQ(sig->attempt, 1);
  EXPECT_EQ(sig->rank, 3);
  EXPECT_EQ(sig->node, "n2");
  EXPECT_EQ(sig->step, 120);
}

TEST(ErrorSignature, AnOomKillTheKernelLoggedIsOutOfMemory) {
  auto sig = error_signature(fault({{"cause", "rank_exit"},
                                    {"rank", 0},
                                    {"node", "n0"},
                                    {"step", 12},
                                    {"signal", 9},
                                    {"reporter", 0},
                                    {"oom", true}}));
  EXPECT_EQ(sig->kind, "oom");
  EXPECT_EQ(sig->text,
            "rank 0 on n0 killed by the kernel's OOM killer (signal 9 (SIGKILL)) at step 12");
}

TEST(ErrorSignature, AProgramsOwnLastWordsClassifyItsExit) {
  auto nan = error_signature(fault({{"cause", "rank_exit"},
                                    {"rank", 0},
                                    {"node", "n0"},
                                    {"step", 7},
                                    {"exit_code", 1},
                                    {"reporter", 0},
                                    {"error",
                                     "kiln train: aborted: step 7: training loss is nan: "
                                     "the run diverged (try a lower train.lr)"}}));
  ASSERT_TRUE(nan.has_value());
  EXPECT_EQ(nan->kind, "nan_loss");
  EXPECT_NE(nan->text.find("rank 0 on n0 stopped: the loss is not finite at step 7"),
            std::string::npos)
      << nan->text;
  auto disk = error_signature(fault({{"cause", "rank_exit"},
                                     {"rank", 1},
                                     {"node", "n1"},
                                     {"step", 20},
                                     {"exit_code", 1},
                                     {"reporter", 1},
                                     {"error",
                                      "kiln train: io error: /ck/step-20: write: No "
                                      "space left on device"}}));
  EXPECT_EQ(disk->kind, "checkpoint");
  auto plain = error_signature(fault({{"cause", "rank_exit"},
                                      {"rank", 1},
                                      {"node", "n1"},
                                      {"exit_code", 2},
                                      {"reporter", 1},
                                      {"error", "bad flag"}}));
  EXPECT_EQ(plain->kind, "exit");
  EXPECT_EQ(plain->text, "rank 1 on n1 exited with code 2: bad flag");
}

TEST(ErrorSignature, ACollectiveThatFailedBlamesThePeer) {
  auto sig = error_signature(fault({{"cause", "rank_exit"},
                                    {"rank", 1},
                                    {"node", "n1"},
                                    {"step", 30},
                                    {"exit_code", 1},
                                    {"reporter", 0},
                                    {"blamed_by", "its flight recorder blames rank 1"},
                                    {"error", "kiln train: comm: peer 1 closed the connection"}}));
  EXPECT_EQ(sig->kind, "comm");
  EXPECT_NE(sig->text.find("rank 0's collective failed at step 30; its flight recorder blames "
                           "rank 1 (rank 1 on n1)"),
            std::string::npos)
      << sig->text;
}

TEST(ErrorSignature, LostNodesAndHangsAndOtherEvents) {
  auto lost = error_signature(fault({{"cause", "node_lost"},
                                     {"rank", 2},
                                     {"node", "n3"},
                                     {"step", 4},
                                     {"message", "no report for 5 s"}}));
  EXPECT_EQ(lost->kind, "lost");
  EXPECT_EQ(lost->text, "node n3 lost at step 4: no report for 5 s");
  auto hung = error_signature(
      fault({{"cause", "hung"}, {"rank", 0}, {"node", "n0"}, {"message", "no step for 60 s"}}));
  EXPECT_EQ(hung->kind, "hang");
  EventRecord placed;
  placed.type = "placed";
  EXPECT_FALSE(error_signature(placed).has_value());
  EXPECT_FALSE(error_signature(fault("not an object")).has_value());
}

}  // namespace
}  // namespace kiln::sched
