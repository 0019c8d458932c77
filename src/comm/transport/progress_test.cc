// Progress's liveness rule: a local peer that exited fails a wait only if what the wait needs
// never came (a peer that finished its last op and left is not a failure).
#include "comm/transport/progress.h"

#include <gtest/gtest.h>

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace kiln::comm {
namespace {

class DeadPeerTest : public testing::Test {
 protected:
  void SetUp() override {
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) _exit(0);
    pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
    ASSERT_GE(pidfd_, 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid_, &status, 0), pid_);  // exited: the pidfd now reads as ready
    peers_.push_back(PeerProcess{1, "h1", pid_, pidfd_});
  }
  void TearDown() override {
    if (pidfd_ >= 0) close(pidfd_);
  }

  pid_t pid_ = -1;
  int pidfd_ = -1;
  std::vector<PeerProcess> peers_;
};

TEST_F(DeadPeerTest, WhatTheDeadPeerWroteCompletesTheWait) {
  auto label = [] { return std::string("allreduce seq=60"); };
  Progress::Context ctx(label);
  AbortState abort;
  ctx.abort = &abort;
  ctx.local_peers = &peers_;
  ctx.self_rank = 0;
  Progress progress(ctx);
  WaitTarget target;
  target.peer_rank = 1;
  // The data is there: no failure, nothing aborted, nobody blamed.
  EXPECT_TRUE(progress.check(target, [] { return true; }).ok());
  EXPECT_FALSE(abort.aborted());
  EXPECT_EQ(progress.culprit_rank(), -1);
  // Through wait(): with no spin or yield, its first check finds the peer dead, and the data
  // turns up only then (the third read of ready()); the wait completes.
  ctx.spin_ns = 0;
  ctx.yield_ns = 0;
  Progress waiting(ctx);
  int reads = 0;
  EXPECT_TRUE(waiting.wait([&reads] { return ++reads >= 3; }, target).ok());
  EXPECT_GE(reads, 3);
  EXPECT_FALSE(abort.aborted());
  // It never came: the peer is named and the communicator aborted.
  Status s = progress.check(target, [] { return false; });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("exited"), std::string::npos) << s.to_string();
  EXPECT_TRUE(abort.aborted());
  EXPECT_EQ(progress.culprit_rank(), 1);
}

}  // namespace
}  // namespace kiln::comm
