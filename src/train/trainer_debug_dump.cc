// See trainer_debug_dump.h.
#include "train/trainer_debug_dump.h"

#include <kiln/base/check.h>
#include <kiln/ckpt/safetensors.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace kiln::train {

Result<DebugDump> DebugDump::create(const std::string& dir, const Gpt2& model, int steps) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::io_error("debug dump directory " + dir + ": " + ec.message());
  DebugDump d;
  d.dir_ = dir;
  d.steps_ = steps;
  d.batch_ = model.batch();
  d.seq_ = model.seq();
  d.vocab_ = model.config().vocab_size;
  const size_t tokens = static_cast<size_t>(steps) * d.batch_ * d.seq_;
  d.inputs_.assign(tokens, 0);
  d.targets_.assign(tokens, 0);
  d.logits_.assign(static_cast<size_t>(d.batch_ * d.seq_ * d.vocab_), 0.0f);
  d.losses_.assign(static_cast<size_t>(steps), 0.0f);
  d.grads_.assign(model.grad_data().size(), 0.0f);
  return d;
}

Status DebugDump::write_initial_weights(const Gpt2& model) const {
  return save_weights(model, dir_ + "/weights0.safetensors");
}

void DebugDump::record_batch(int step, std::span<const int32_t> inputs,
                             std::span<const int32_t> targets) {
  const size_t n = static_cast<size_t>(batch_ * seq_);
  KILN_CHECK(step >= 1 && step <= steps_ && inputs.size() == n && targets.size() == n)
      << "step " << step << " of " << steps_ << ", " << inputs.size() << " tokens";
  std::copy(inputs.begin(), inputs.end(), inputs_.begin() + (step - 1) * n);
  std::copy(targets.begin(), targets.end(), targets_.begin() + (step - 1) * n);
}

void DebugDump::record_loss(int step, float loss) {
  KILN_CHECK(step >= 1 && step <= steps_) << "step " << step << " of " << steps_;
  losses_[step - 1] = loss;
}

void DebugDump::record_logits(const Gpt2& model) {
  // (B*T, Vp) rows -> (B*T, V): drop each row's pad columns.
  const std::span<const float> logits = model.logits();
  const size_t vp = static_cast<size_t>(model.config().padded_vocab());
  const size_t v = static_cast<size_t>(vocab_);
  for (size_t row = 0; row < static_cast<size_t>(batch_ * seq_); ++row) {
    std::copy_n(logits.begin() + row * vp, v, logits_.begin() + row * v);
  }
}

void DebugDump::record_grads(const Gpt2& model) {
  const std::span<const float> grads = model.grad_data();
  std::copy(grads.begin(), grads.end(), grads_.begin());
}

Status DebugDump::write_steps(const Gpt2& model, int steps_done) const {
  KILN_CHECK(steps_done >= 0 && steps_done <= steps_) << steps_done << " of " << steps_;
  const int64_t s = steps_done;
  std::vector<ckpt::TensorRef> tensors = {
      {"inputs", ckpt::DType::kI32, {s, batch_, seq_}, inputs_.data()},
      {"targets", ckpt::DType::kI32, {s, batch_, seq_}, targets_.data()},
      {"logits", ckpt::DType::kF32, {batch_, seq_, vocab_}, logits_.data()},
      {"losses", ckpt::DType::kF32, {s}, losses_.data()},
  };
  for (const ParamInfo& p : model.params()) {
    tensors.push_back({"grad." + p.name, ckpt::DType::kF32, p.shape, grads_.data() + p.offset});
  }
  return ckpt::write_safetensors(dir_ + "/steps.safetensors", tensors);
}

}  // namespace kiln::train
