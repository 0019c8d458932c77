// Tests of what `kiln train` prints: the JSON lines and the live progress line.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "train/trainer_json.h"
#include "train/trainer_progress.h"

namespace kiln::train {
namespace {

StepReport report(int step, int max_steps = 300) {
  StepReport r;
  r.step = step;
  r.max_steps = max_steps;
  r.loss = 6.1234f;
  r.lr = 6e-4;
  r.grad_norm = 1.5;
  r.tokens_per_s = 1234.4;
  r.step_ms = 210.2;
  r.mfu = 0.21;
  r.world = 2;
  r.comm_exposed_ms = 3.5;
  r.ckpt_stall_ms = 12.25;
  return r;
}

TEST(StepJsonTest, HasEveryFieldWithItsValue) {
  std::array<char, kStepJsonMax> buf{};
  StepReport r = report(12);
  const nlohmann::json j = nlohmann::json::parse(format_step_json(r, buf));
  EXPECT_EQ(j["step"], 12);
  EXPECT_FLOAT_EQ(j["loss"].get<float>(), 6.1234f);
  EXPECT_DOUBLE_EQ(j["lr"].get<double>(), 6e-4);
  EXPECT_DOUBLE_EQ(j["grad_norm"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["tokens_per_s"].get<double>(), 1234.4);
  EXPECT_DOUBLE_EQ(j["step_ms"].get<double>(), 210.2);
  EXPECT_DOUBLE_EQ(j["mfu"].get<double>(), 0.21);
  EXPECT_EQ(j["world"], 2);
  EXPECT_DOUBLE_EQ(j["comm_exposed_ms"].get<double>(), 3.5);
  EXPECT_DOUBLE_EQ(j["ckpt_stall_ms"].get<double>(), 12.25);
  EXPECT_FALSE(j.contains("val_loss"));
  EXPECT_EQ(j.size(), 10u);

  r.validated = true;
  r.val_loss = 6.5f;
  const nlohmann::json v = nlohmann::json::parse(format_step_json(r, buf));
  EXPECT_FLOAT_EQ(v["val_loss"].get<float>(), 6.5f);
}

TEST(StepJsonTest, NonFiniteValuesAreNullAndExtremesFit) {
  std::array<char, kStepJsonMax> buf{};
  StepReport r = report(std::numeric_limits<int>::max());
  r.loss = std::numeric_limits<float>::quiet_NaN();
  r.grad_norm = std::numeric_limits<double>::infinity();
  r.lr = -std::numeric_limits<double>::min();
  r.tokens_per_s = -std::numeric_limits<double>::max();
  r.step_ms = std::numeric_limits<double>::denorm_min();
  r.mfu = -1.2345678901234567e-300;
  r.validated = true;
  r.val_loss = -std::numeric_limits<float>::max();
  const nlohmann::json j = nlohmann::json::parse(format_step_json(r, buf));
  EXPECT_TRUE(j["loss"].is_null());
  EXPECT_TRUE(j["grad_norm"].is_null());
  EXPECT_DOUBLE_EQ(j["tokens_per_s"].get<double>(), -std::numeric_limits<double>::max());
  EXPECT_EQ(j["mfu"].get<double>(), -1.2345678901234567e-300);
}

TEST(DoneJsonTest, HasEveryField) {
  TrainSummary s;
  s.steps = 20;
  s.train_loss = 5.5f;
  s.val_loss = std::numeric_limits<float>::quiet_NaN();
  s.tokens_per_s = 1000.5;
  s.peak_rss_bytes = 123456789;
  const nlohmann::json j = nlohmann::json::parse(format_done_json(s));
  EXPECT_EQ(j["event"], "done");
  EXPECT_EQ(j["steps"], 20);
  EXPECT_FLOAT_EQ(j["train_loss"].get<float>(), 5.5f);
  EXPECT_TRUE(j["val_loss"].is_null());
  EXPECT_DOUBLE_EQ(j["tokens_per_s"].get<double>(), 1000.5);
  EXPECT_EQ(j["peak_rss_bytes"], 123456789);
  EXPECT_FALSE(j.contains("config_sha256"));
  EXPECT_EQ(j["precision"], "fp32");
  // The config's digest, when the caller gave it, names what was run (a trial compares by it).
  s.config_sha256 = std::string(64, 'a');
  s.stopped = true;
  const nlohmann::json k = nlohmann::json::parse(format_done_json(s));
  EXPECT_EQ(k["config_sha256"], std::string(64, 'a'));
  EXPECT_EQ(k["stopped"], true);
  s.precision = Precision::kBf16;
  EXPECT_EQ(nlohmann::json::parse(format_done_json(s))["precision"], "bf16");
}

TEST(ProgressTest, EtaReadsAsHoursMinutesSeconds) {
  std::array<char, 16> buf{};
  EXPECT_EQ(format_eta(0, buf), "0s");
  EXPECT_EQ(format_eta(44.2, buf), "45s");
  EXPECT_EQ(format_eta(62, buf), "1m02s");
  EXPECT_EQ(format_eta(3600 * 3 + 7 * 60 + 5, buf), "3h07m");
  EXPECT_EQ(format_eta(std::numeric_limits<double>::infinity(), buf), "-");
  EXPECT_EQ(format_eta(-1, buf), "-");
}

TEST(ProgressTest, LineHasTheDocumentedLayout) {
  std::array<char, kProgressLineMax> buf{};
  EXPECT_EQ(format_progress_line(report(12), true, 6.2011f, 62, buf),
            "step 12/300 | loss 6.123 | val 6.201 | 1234 tok/s | 210 ms/step | ETA 1m02s");
  EXPECT_EQ(format_progress_line(report(1), false, 0, 5, buf),
            "step 1/300 | loss 6.123 | val - | 1234 tok/s | 210 ms/step | ETA 5s");
}

TEST(ProgressTest, WidestLineFits) {
  std::array<char, kProgressLineMax> buf{};
  StepReport r = report(std::numeric_limits<int>::max(), std::numeric_limits<int>::max());
  r.loss = -std::numeric_limits<float>::max();
  r.tokens_per_s = 1e300;  // far wider than any real rate: truncated, never overflowed
  const std::string_view line = format_progress_line(r, true, r.loss, 1e30, buf);
  EXPECT_LT(line.size(), kProgressLineMax);
  EXPECT_EQ(line.rfind("step 2147483647/2147483647 | loss -", 0), 0u) << line;
}

TEST(ProgressTest, RedrawsInPlaceAtMostFourTimesASecond) {
  std::ostringstream out;
  ProgressLine line(&out, /*live=*/true);
  constexpr int64_t kMs = 1'000'000;
  line.update(report(1), 10, 0);          // the first step is always drawn
  line.update(report(2), 10, 100 * kMs);  // too soon
  line.update(report(3), 10, 200 * kMs);  // too soon
  line.update(report(4), 10, 260 * kMs);  // due
  const std::string text = out.str();
  EXPECT_EQ(text.find('\n'), std::string::npos) << "no newline between plain steps";
  EXPECT_NE(text.find("\rstep 1/300"), std::string::npos);
  EXPECT_EQ(text.find("step 2/300"), std::string::npos);
  EXPECT_EQ(text.find("step 3/300"), std::string::npos);
  EXPECT_NE(text.find("\rstep 4/300"), std::string::npos);
}

TEST(ProgressTest, ValidationAndLastStepsAreKeptOnTheirOwnLines) {
  std::ostringstream out;
  ProgressLine line(&out, /*live=*/true);
  line.update(report(1, 3), 10, 0);
  StepReport val = report(2, 3);
  val.validated = true;
  val.val_loss = 7.25f;
  line.update(val, 5, 1);  // drawn although only 1 ns later: it validated
  line.update(report(3, 3), 0, 2);
  const std::string text = out.str();
  EXPECT_NE(text.find("\rstep 2/3 | loss 6.123 | val 7.250 |"), std::string::npos) << text;
  EXPECT_NE(text.find("ETA 5s\n"), std::string::npos) << text;
  // The last step shows the last validation and ends with a newline.
  EXPECT_NE(text.find("\rstep 3/3 | loss 6.123 | val 7.250 |"), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
}

TEST(ProgressTest, ShorterLinePadsOverTheLongerOne) {
  std::ostringstream out;
  ProgressLine line(&out, /*live=*/true);
  StepReport wide = report(1);
  wide.tokens_per_s = 123456789;
  line.update(wide, 10, 0);
  const size_t first = out.str().size() - 1;  // without its '\r'
  line.update(report(2), 10, kProgressRedrawIntervalNs);
  const std::string text = out.str();
  const std::string second = text.substr(text.rfind('\r') + 1);
  EXPECT_EQ(second.size(), first) << "the second draw must cover the first: '" << second << "'";
}

TEST(ProgressTest, NotLiveKeepsOnlyValidationAndLastLines) {
  std::ostringstream out;
  ProgressLine line(&out, /*live=*/false);
  for (int step = 1; step <= 5; ++step) {
    StepReport r = report(step, 5);
    r.validated = step == 2;
    r.val_loss = 7.0f;
    line.update(r, 1, step * kProgressRedrawIntervalNs);
  }
  const std::string text = out.str();
  EXPECT_EQ(text.find('\r'), std::string::npos) << text;
  EXPECT_EQ(text.rfind("step 2/5 | loss 6.123 | val 7.000 |", 0), 0u) << text;
  EXPECT_NE(text.find("\nstep 5/5 | loss 6.123 | val 7.000 |"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
}

}  // namespace
}  // namespace kiln::train
