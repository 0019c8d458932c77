#include <kiln/base/check.h>
#include <kiln/base/status.h>

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.to_string(), "OK");
}

TEST(StatusTest, EachConstructorSetsItsCodeAndPredicate) {
  EXPECT_TRUE(Status::invalid_argument("x").is_invalid_argument());
  EXPECT_TRUE(Status::not_found("x").is_not_found());
  EXPECT_TRUE(Status::io_error("x").is_io_error());
  EXPECT_TRUE(Status::timeout("x").is_timeout());
  EXPECT_TRUE(Status::aborted("x").is_aborted());
  EXPECT_TRUE(Status::corruption("x").is_corruption());
  EXPECT_TRUE(Status::not_supported("x").is_not_supported());
  EXPECT_TRUE(Status::unavailable("x").is_unavailable());
  EXPECT_FALSE(Status::timeout("x").is_aborted());
  EXPECT_FALSE(Status::timeout("x").ok());
}

TEST(StatusTest, ToStringNamesTheCode) {
  EXPECT_EQ(Status::timeout("recv from rank 3 timed out after 30000 ms").to_string(),
            "Timeout: recv from rank 3 timed out after 30000 ms");
  EXPECT_EQ(status_code_name(StatusCode::kCorruption), "Corruption");
}

TEST(StatusTest, WithContextPrependsOutermostFirst) {
  Status inner = Status::io_error("write: No space left on device");
  Status outer = inner.with_context("shard 3").with_context("checkpoint step=200");
  EXPECT_TRUE(outer.is_io_error());
  EXPECT_EQ(outer.message(), "checkpoint step=200: shard 3: write: No space left on device");
  EXPECT_TRUE(Status().with_context("ignored").ok());
}

Status fails_at(int step, int fail_step) {
  if (step == fail_step) return Status::aborted("step " + std::to_string(step));
  return Status();
}

Status run_steps(int fail_step, int* completed) {
  for (int step = 0; step < 5; ++step) {
    KILN_RETURN_IF_ERROR(fails_at(step, fail_step));
    ++*completed;
  }
  return Status();
}

TEST(StatusTest, ReturnIfErrorStopsAtTheFirstFailure) {
  int completed = 0;
  Status s = run_steps(2, &completed);
  EXPECT_TRUE(s.is_aborted());
  EXPECT_EQ(s.message(), "step 2");
  EXPECT_EQ(completed, 2);
  completed = 0;
  EXPECT_TRUE(run_steps(-1, &completed).ok());
  EXPECT_EQ(completed, 5);
}

TEST(CheckDeathTest, FailedCheckPrintsLocationConditionAndValues) {
  int received = 3;
  EXPECT_DEATH(KILN_CHECK_EQ(received, 4) << "bytes from rank " << 2,
               "status_test.cc:[0-9]+: check failed: received == 4 \\(3 vs 4\\) bytes from rank 2");
  EXPECT_DEATH(KILN_CHECK(received > 10) << "too few", "check failed: received > 10 too few");
}

TEST(CheckDeathTest, OkStatusWithMessageIsAProgrammerError) {
  EXPECT_DEATH(Status(StatusCode::kOk, "nonsense"), "an OK Status carries no message");
}

TEST(CheckTest, OperandsAreEvaluatedOnce) {
  int calls = 0;
  auto next = [&] { return ++calls; };
  KILN_CHECK_EQ(next(), 1);
  KILN_CHECK(next() == 2);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace kiln
