// Tests of the trainer on the real SOTU shards with small GPT-2s: bit-identical losses for a
// seed, falling losses, validation, the debug dump's contents, export, metrics and JSON output,
// and the progress pipe a node agent reads (full, closed, not open).
#include <kiln/ckpt/catalog.h>
#include <kiln/ckpt/safetensors.h>
#include <kiln/obs/metrics.h>
#include <kiln/train/model.h>
#include <kiln/train/trainer.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/testing/temp_path.h"
#include "train/trainer_test_util.h"

namespace kiln::train {
namespace {

using testing::bits;
using testing::kTrainDir;
using testing::kValDir;
using testing::quiet_options;
using testing::small_config;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string& dir : {kTrainDir, kValDir}) {
      ASSERT_TRUE(std::filesystem::exists(dir + "/.complete"))
          << dir << " is missing: run scripts/fetch-data";
    }
  }

  // Runs training and returns every step's report.
  static std::vector<StepReport> run(const TrainConfig& config, const TrainerOptions& options,
                                     obs::MetricsRegistry* registry = nullptr,
                                     TrainSummary* summary = nullptr) {
    std::vector<StepReport> reports;
    Result<TrainSummary> s = train(config, options, registry, Logger(),
                                   [&](const StepReport& r) { reports.push_back(r); });
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (s.ok() && summary != nullptr) *summary = *s;
    return reports;
  }
};

TEST_F(TrainerTest, SameSeedAndThreadsGiveBitIdenticalLosses) {
  const TrainConfig config = small_config(3);
  const std::vector<StepReport> a = run(config, quiet_options());
  const std::vector<StepReport> b = run(config, quiet_options());
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(bits(a[i].loss), bits(b[i].loss))
        << "step " << i + 1 << ": " << a[i].loss << " vs " << b[i].loss;
    EXPECT_EQ(a[i].grad_norm, b[i].grad_norm) << "step " << i + 1;
    EXPECT_EQ(a[i].validated, b[i].validated);
  }
  EXPECT_TRUE(a[2].validated) << "the last step validates";
  EXPECT_EQ(bits(a[2].val_loss), bits(b[2].val_loss));
  // A different seed draws other weights and other batches.
  TrainConfig other = config;
  other.train.seed = 1338;
  const std::vector<StepReport> c = run(other, quiet_options());
  ASSERT_EQ(c.size(), 3u);
  EXPECT_NE(bits(c[0].loss), bits(a[0].loss));
}

TEST_F(TrainerTest, LossFallsOverThirtySteps) {
  TrainConfig config = small_config(30);
  config.train.val_every = 15;
  TrainSummary summary;
  const std::vector<StepReport> r = run(config, quiet_options(), nullptr, &summary);
  ASSERT_EQ(r.size(), 30u);
  // An untrained model predicts nearly uniformly: ln(50257) = 10.82.
  EXPECT_NEAR(r[0].loss, std::log(50257.0), 0.3);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) {
    first += r[i].loss / 5;
    last += r[25 + i].loss / 5;
  }
  EXPECT_LT(last, first - 2.0) << "mean loss of steps 1-5 " << first << ", of 26-30 " << last;
  // Validated at 15 and 30 only, and the held-out loss fell too.
  for (const StepReport& s : r)
    EXPECT_EQ(s.validated, s.step == 15 || s.step == 30) << s.step;
  EXPECT_LT(r[29].val_loss, r[14].val_loss);
  EXPECT_EQ(summary.steps, 30);
  EXPECT_EQ(summary.train_loss, r[29].loss);
  EXPECT_EQ(summary.val_loss, r[29].val_loss);
  EXPECT_GT(summary.tokens_per_s, 0);
  EXPECT_GT(summary.peak_rss_bytes, 0);
  // The schedule as reported: warmup to 3e-3 at step 5, then down to min_lr at the last step.
  EXPECT_DOUBLE_EQ(r[0].lr, 3e-3 / 5);
  EXPECT_DOUBLE_EQ(r[4].lr, 3e-3);
  EXPECT_DOUBLE_EQ(r[29].lr, 3e-4);
}

TEST_F(TrainerTest, GradAccumulationAveragesTheMicroBatches) {
  // Two micro-batches of 2 see the same windows as one batch of 4, in the same order, so the
  // first step's loss (before any update) is their mean up to f32 rounding.
  TrainConfig one = small_config(1);
  one.train.val_batches = 0;
  TrainConfig two = one;
  two.train.batch = 2;
  two.train.grad_accum = 2;
  const std::vector<StepReport> a = run(one, quiet_options());
  const std::vector<StepReport> b = run(two, quiet_options());
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_NEAR(a[0].loss, b[0].loss, 1e-4);
  EXPECT_NEAR(a[0].grad_norm, b[0].grad_norm, 1e-3 * a[0].grad_norm);
}

// Mean cross-entropy of (rows, V) logits against targets, in double.
double cross_entropy(const float* logits, const int32_t* targets, int64_t rows, int64_t v) {
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * v;
    double max = row[0];
    for (int64_t i = 1; i < v; ++i)
      max = std::max<double>(max, row[i]);
    double z = 0;
    for (int64_t i = 0; i < v; ++i)
      z += std::exp(row[i] - max);
    sum += std::log(z) + max - row[targets[r]];
  }
  return sum / static_cast<double>(rows);
}

TEST_F(TrainerTest, DebugDumpHoldsWeightsBatchesLogitsLossesAndGradients) {
  const TrainConfig config = small_config(2);
  TrainerOptions options = quiet_options();
  options.debug_dump_dir = kiln::testing::unique_temp_path("dump");
  const std::vector<StepReport> reports = run(config, options);
  ASSERT_EQ(reports.size(), 2u);
  constexpr int64_t B = 4, T = 64, V = 50257, C = 64;

  Result<Gpt2> model = Gpt2::create(config.model, 1, 1);
  ASSERT_TRUE(model.ok());
  Result<ckpt::SafetensorsFile> w0 =
      ckpt::SafetensorsFile::open(options.debug_dump_dir + "/weights0.safetensors");
  ASSERT_TRUE(w0.ok()) << w0.status().to_string();
  ASSERT_EQ(w0->tensors().size(), model->params().size());
  for (const ParamInfo& p : model->params()) {
    Result<ckpt::TensorEntry> t = w0->get(p.name);
    ASSERT_TRUE(t.ok()) << p.name;
    EXPECT_EQ(t->shape, p.shape) << p.name;
  }
  EXPECT_EQ(w0->get("wte.weight")->shape, (std::vector<int64_t>{V, C}));
  EXPECT_EQ(w0->metadata().at("format"), "kiln-gpt2");
  // The initial weights are the seed's: a fresh init writes the same bytes.
  model->init_weights(config.train.seed);
  const std::string again = kiln::testing::unique_temp_path("again.safetensors");
  ASSERT_TRUE(save_weights(*model, again).ok());
  Result<ckpt::SafetensorsFile> w1 = ckpt::SafetensorsFile::open(again);
  ASSERT_TRUE(w1.ok());
  for (const ckpt::TensorEntry& t : w1->tensors()) {
    const ckpt::TensorEntry dumped = *w0->get(t.name);
    ASSERT_EQ(t.bytes.size(), dumped.bytes.size()) << t.name;
    EXPECT_EQ(std::memcmp(t.bytes.data(), dumped.bytes.data(), t.bytes.size()), 0) << t.name;
  }

  Result<ckpt::SafetensorsFile> steps =
      ckpt::SafetensorsFile::open(options.debug_dump_dir + "/steps.safetensors");
  ASSERT_TRUE(steps.ok()) << steps.status().to_string();
  struct Expected {
    const char* name;
    ckpt::DType dtype;
    std::vector<int64_t> shape;
  };
  for (const Expected& e : {Expected{"inputs", ckpt::DType::kI32, {2, B, T}},
                            Expected{"targets", ckpt::DType::kI32, {2, B, T}},
                            Expected{"logits", ckpt::DType::kF32, {B, T, V}},
                            Expected{"losses", ckpt::DType::kF32, {2}}}) {
    Result<ckpt::TensorEntry> t = steps->get(e.name);
    ASSERT_TRUE(t.ok()) << e.name;
    EXPECT_EQ(t->dtype, e.dtype) << e.name;
    EXPECT_EQ(t->shape, e.shape) << e.name;
  }
  for (const ParamInfo& p : model->params()) {
    Result<ckpt::TensorEntry> g = steps->get("grad." + p.name);
    ASSERT_TRUE(g.ok()) << "grad." << p.name;
    EXPECT_EQ(g->shape, p.shape) << p.name;
    EXPECT_EQ(g->dtype, ckpt::DType::kF32);
  }
  EXPECT_EQ(steps->tensors().size(), 4 + model->params().size());

  const auto* inputs = reinterpret_cast<const int32_t*>(steps->get("inputs")->bytes.data());
  const auto* targets = reinterpret_cast<const int32_t*>(steps->get("targets")->bytes.data());
  const auto* losses = reinterpret_cast<const float*>(steps->get("losses")->bytes.data());
  const auto* logits = reinterpret_cast<const float*>(steps->get("logits")->bytes.data());
  // Targets are the inputs shifted by one within each window.
  for (int64_t s = 0; s < 2; ++s) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t + 1 < T; ++t) {
        ASSERT_EQ(inputs[(s * B + b) * T + t + 1], targets[(s * B + b) * T + t]);
      }
    }
  }
  EXPECT_NE(std::memcmp(inputs, inputs + B * T, B * T * sizeof(int32_t)), 0)
      << "both steps recorded the same batch";
  EXPECT_EQ(losses[0], reports[0].loss);
  EXPECT_EQ(losses[1], reports[1].loss);
  // The logits are step 1's without the pad columns: their cross-entropy is step 1's loss.
  EXPECT_NEAR(cross_entropy(logits, targets, B * T, V), losses[0], 1e-4);
  // Gradients before clipping: their norm is step 1's reported grad_norm.
  double sq = 0;
  for (const ParamInfo& p : model->params()) {
    const ckpt::TensorEntry g = *steps->get("grad." + p.name);
    const auto* data = reinterpret_cast<const float*>(g.bytes.data());
    for (size_t i = 0; i < p.numel; ++i)
      sq += static_cast<double>(data[i]) * data[i];
  }
  EXPECT_NEAR(std::sqrt(sq), reports[0].grad_norm, 1e-4 * reports[0].grad_norm);
  std::filesystem::remove_all(options.debug_dump_dir);
  std::filesystem::remove(again);
}

TEST_F(TrainerTest, DebugDumpNeedsOneBatchPerStep) {
  TrainConfig config = small_config(1);
  config.train.grad_accum = 2;
  TrainerOptions options = quiet_options();
  options.debug_dump_dir = kiln::testing::unique_temp_path("dump");
  Result<TrainSummary> s = train(config, options, nullptr, Logger());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.status().is_invalid_argument());
  EXPECT_NE(s.status().message().find("grad_accum"), std::string::npos) << s.status().message();
}

TEST_F(TrainerTest, ExportWritesTheFinalWeights) {
  const TrainConfig config = small_config(2);
  TrainerOptions options = quiet_options();
  options.export_path = kiln::testing::unique_temp_path("final.safetensors");
  run(config, options);
  Result<Gpt2> model = Gpt2::create(config.model, 1, 1);
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE(load_weights(&*model, options.export_path).ok());
  // Trained weights are not the initial ones.
  Result<Gpt2> initial = Gpt2::create(config.model, 1, 1);
  ASSERT_TRUE(initial.ok());
  initial->init_weights(config.train.seed);
  const std::span<const float> a = std::as_const(*model).param_data();
  const std::span<const float> b = std::as_const(*initial).param_data();
  ASSERT_EQ(a.size(), b.size());
  EXPECT_FALSE(std::equal(a.begin(), a.end(), b.begin()));
  std::filesystem::remove(options.export_path);
}

// A stop request made from the step callback ends the run after that step, with a checkpoint
// of it; a rerun resumes there and its losses are the uninterrupted run's, bit for bit.
TEST_F(TrainerTest, AStopRequestEndsTheRunAfterItsStepAndTheRerunContinuesExactly) {
  const TrainConfig config = small_config(6);
  const std::vector<StepReport> straight = run(config, quiet_options());
  ASSERT_EQ(straight.size(), 6u);

  TrainerOptions options = quiet_options();
  options.ckpt_dir = kiln::testing::unique_temp_dir("stop");
  options.export_path = kiln::testing::unique_temp_path("stopped.safetensors");
  StopRequest stop;
  options.stop = &stop;
  std::vector<StepReport> first;
  Result<TrainSummary> s = train(config, options, nullptr, Logger(), [&](const StepReport& r) {
    first.push_back(r);
    if (r.step == 2) stop.request();
  });
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_TRUE(s->stopped);
  EXPECT_EQ(s->steps, 2);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(options.export_path)) << "a stopped run is not final";
  Result<ckpt::ResumeChoice> saved = ckpt::find_resume_checkpoint(options.ckpt_dir);
  ASSERT_TRUE(saved.ok() && saved->chosen) << "no checkpoint of the stop step";
  EXPECT_EQ(saved->chosen->step, 2);

  options.stop = nullptr;
  options.export_path.clear();
  TrainSummary summary;
  const std::vector<StepReport> rest = run(config, options, nullptr, &summary);
  EXPECT_FALSE(summary.stopped);
  ASSERT_EQ(rest.size(), 4u);
  for (size_t i = 0; i < rest.size(); ++i) {
    const StepReport& want = straight[i + 2];
    EXPECT_EQ(rest[i].step, want.step);
    EXPECT_EQ(rest[i].resumed_from, 2);
    EXPECT_EQ(bits(rest[i].loss), bits(want.loss)) << "step " << want.step;
    EXPECT_EQ(rest[i].grad_norm, want.grad_norm) << "step " << want.step;
  }
}

// A request during the last step changes nothing: the run ends as it would have.
TEST_F(TrainerTest, AStopRequestAtTheLastStepFinishesTheRun) {
  TrainerOptions options = quiet_options();
  StopRequest stop;
  stop.request();  // before step 1: taken after step 1, the last
  options.stop = &stop;
  TrainSummary summary;
  EXPECT_EQ(run(small_config(1), options, nullptr, &summary).size(), 1u);
  EXPECT_FALSE(summary.stopped);
  EXPECT_EQ(summary.steps, 1);
}

TEST_F(TrainerTest, JsonLinesAndMetricsReportEveryStep) {
  const TrainConfig config = small_config(3);
  TrainerOptions options;  // peak measured by the probe
  std::ostringstream out;
  options.out = &out;
  options.json = true;
  obs::MetricsRegistry registry;
  std::vector<StepReport> reports;
  std::string text;  // the exposition during the last step (the series go when train() returns)
  Result<TrainSummary> summary =
      train(config, options, &registry, Logger(), [&](const StepReport& r) {
        reports.push_back(r);
        if (r.step == 3) text = registry.expose_text();
      });
  ASSERT_TRUE(summary.ok()) << summary.status().to_string();
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_GT(summary->peak_gflops, 0.1) << "the sgemm probe measured nothing";

  std::istringstream lines(out.str());
  std::string line;
  std::vector<nlohmann::json> parsed;
  while (std::getline(lines, line))
    parsed.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(parsed.size(), 4u) << out.str();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(parsed[i]["step"], i + 1);
    EXPECT_EQ(parsed[i]["loss"].get<float>(), reports[i].loss);
    EXPECT_GT(parsed[i]["mfu"].get<double>(), 0);
    EXPECT_EQ(parsed[i].contains("val_loss"), i == 2);
  }
  EXPECT_EQ(parsed[3]["event"], "done");
  EXPECT_EQ(parsed[3]["steps"], 3);
  EXPECT_EQ(parsed[3]["val_loss"].get<float>(), reports[2].val_loss);

  EXPECT_NE(text.find("kiln_train_step 3"), std::string::npos) << text;
  EXPECT_NE(text.find("kiln_train_step_seconds_count 3"), std::string::npos);
  for (const char* name : {"kiln_train_loss ", "kiln_train_val_loss ",
                           "kiln_train_tokens_per_second ", "kiln_train_mfu "}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
  EXPECT_EQ(registry.expose_text().find("kiln_train_step "), std::string::npos)
      << "the series outlived the run";
}

TEST_F(TrainerTest, MissingDataNamesTheKeyAndDirectory) {
  TrainConfig config = small_config(1);
  config.data.train = kiln::testing::unique_temp_path("no-such-dir");
  Result<TrainSummary> s = train(config, quiet_options(), nullptr, Logger());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("data.train"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find(config.data.train), std::string::npos);
}

// Everything in the pipe's read end now (it is non-blocking: the test never waits on it).
std::string drain_pipe(int fd) {
  std::string got;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return got;
    got.append(buf, static_cast<size_t>(n));
  }
}

struct Pipe {
  int read_end = -1, write_end = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
    read_end = fds[0];
    write_end = fds[1];
  }
  ~Pipe() {
    if (read_end >= 0) close(read_end);
    if (write_end >= 0) close(write_end);
  }
};

TEST_F(TrainerTest, TheProgressFdGetsOneJsonLinePerStepAndADoneLine) {
  Pipe pipe;
  TrainerOptions options = quiet_options();
  options.progress_fd = pipe.write_end;
  TrainSummary summary;
  const std::vector<StepReport> reports = run(small_config(3), options, nullptr, &summary);
  ASSERT_EQ(reports.size(), 3u);
  std::istringstream lines(drain_pipe(pipe.read_end));
  std::vector<nlohmann::json> got;
  for (std::string line; std::getline(lines, line);) {
    EXPECT_LT(line.size() + 1, kProgressLineBytesMax) << line;
    got.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(got.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    const nlohmann::json& j = got[i];
    // Validation steps add val_loss (the curves' validation points).
    EXPECT_EQ(j.size(), reports[i].validated ? 9u : 8u) << j.dump();
    EXPECT_EQ(j.contains("val_loss"), reports[i].validated) << j.dump();
    if (reports[i].validated) {
      EXPECT_FLOAT_EQ(static_cast<float>(j["val_loss"].get<double>()), reports[i].val_loss);
    }
    EXPECT_DOUBLE_EQ(j["lr"].get<double>(), reports[i].lr);
    EXPECT_DOUBLE_EQ(j["mfu"].get<double>(), reports[i].mfu);
    EXPECT_DOUBLE_EQ(j["ckpt_stall_ms"].get<double>(), reports[i].ckpt_stall_ms);
    EXPECT_EQ(j["step"], reports[i].step);
    EXPECT_FLOAT_EQ(static_cast<float>(j["loss"].get<double>()), reports[i].loss);
    EXPECT_DOUBLE_EQ(j["step_ms"].get<double>(), reports[i].step_ms);
    EXPECT_DOUBLE_EQ(j["tokens_per_s"].get<double>(), reports[i].tokens_per_s);
    // The rank's wait on the gradient collective: with the step time, its own work.
    EXPECT_DOUBLE_EQ(j["comm_exposed_ms"].get<double>(), reports[i].comm_exposed_ms);
  }
  EXPECT_EQ(got[3], nlohmann::json::parse(R"({"event":"done","steps":3,"stopped":false})"));
  EXPECT_NE(fcntl(pipe.write_end, F_GETFD), -1) << "the descriptor is still open, the caller's";
}

TEST_F(TrainerTest, AFullProgressPipeDropsLinesAndNeverBlocksTraining) {
  Pipe pipe;
  // Fill the pipe: nobody reads it while the run goes on.
  const std::string filler(4096, 'x');
  size_t filled = 0;
  for (ssize_t n = 0; (n = write(pipe.write_end, filler.data(), filler.size())) > 0;)
    filled += static_cast<size_t>(n);
  ASSERT_GT(filled, 0u);
  // The trainer must make the descriptor non-blocking itself: hand it over blocking.
  ASSERT_EQ(fcntl(pipe.write_end, F_SETFL, 0), 0);
  // A watchdog that empties the pipe if training is stuck on it, so a regression fails here
  // instead of hanging the binary.
  std::atomic<bool> finished{false}, rescued{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 600 && !finished.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!finished.load()) {
      rescued = true;
      drain_pipe(pipe.read_end);
    }
  });
  TrainerOptions options = quiet_options();
  options.progress_fd = pipe.write_end;
  const std::vector<StepReport> reports = run(small_config(2), options);
  finished = true;
  watchdog.join();
  EXPECT_FALSE(rescued.load()) << "training blocked on the full progress pipe";
  EXPECT_EQ(reports.size(), 2u);
  EXPECT_NE(fcntl(pipe.write_end, F_GETFL) & O_NONBLOCK, 0);
  // Only the filler is in the pipe: the lines were dropped whole, not written in part.
  const std::string in_pipe = drain_pipe(pipe.read_end);
  EXPECT_EQ(in_pipe.size(), filled);
  EXPECT_EQ(in_pipe.find_first_not_of('x'), std::string::npos);
}

TEST_F(TrainerTest, AProgressReaderThatWentAwayDoesNotStopTraining) {
  Pipe pipe;
  close(pipe.read_end);
  pipe.read_end = -1;
  TrainerOptions options = quiet_options();
  options.progress_fd = pipe.write_end;
  // With SIGPIPE at its default action this process would die at the first line.
  EXPECT_EQ(run(small_config(2), options).size(), 2u);
}

TEST_F(TrainerTest, AProgressFdThatIsNotOpenIsRefused) {
  TrainerOptions options = quiet_options();
  options.progress_fd = 1'000'000;
  Result<TrainSummary> s = train(small_config(1), options, nullptr, Logger());
  ASSERT_TRUE(s.status().is_invalid_argument()) << s.status().to_string();
  EXPECT_NE(s.status().message().find("progress fd 1000000"), std::string::npos);
}

TEST_F(TrainerTest, ExportInitialWeightsIsTheSeedsInit) {
  const ModelConfig config{2, 2, 64, 64, 50257};
  const std::string a = kiln::testing::unique_temp_path("a.safetensors");
  const std::string b = kiln::testing::unique_temp_path("b.safetensors");
  ASSERT_TRUE(export_initial_weights(config, 5, a).ok());
  ASSERT_TRUE(export_initial_weights(config, 6, b).ok());
  Result<Gpt2> model = Gpt2::create(config, 1, 1);
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE(load_weights(&*model, a).ok());
  Result<Gpt2> fresh = Gpt2::create(config, 1, 1);
  fresh->init_weights(5);
  const std::span<const float> x = std::as_const(*model).param_data();
  const std::span<const float> y = std::as_const(*fresh).param_data();
  EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin()));
  ASSERT_TRUE(load_weights(&*model, b).ok());
  EXPECT_FALSE(std::equal(x.begin(), x.end(), y.begin()));
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

}  // namespace
}  // namespace kiln::train
