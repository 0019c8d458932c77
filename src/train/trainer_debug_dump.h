// `kiln train --debug-dump DIR`: what the golden parity test compares against PyTorch.
//
//   DIR/weights0.safetensors   the initial weights, export format (save_weights), before step 1
//   DIR/steps.safetensors      at the end:
//     inputs   I32 (S, B, T)   every step's batch
//     targets  I32 (S, B, T)
//     logits   F32 (B, T, V)   step 1's, without the pad columns of the padded vocabulary
//     losses   F32 (S)
//     grad.<name>  F32         step 1's gradients before clipping, export names and shapes
//
// S is the number of steps run. Every record is sized by create(), before step 1: recording a
// step copies into those buffers and allocates nothing. One batch per step, so grad_accum must
// be 1.
#ifndef KILN_TRAIN_TRAINER_DEBUG_DUMP_H_
#define KILN_TRAIN_TRAINER_DEBUG_DUMP_H_

#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/train/model.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kiln::train {

class DebugDump {
 public:
  // Creates `dir` (and its parents) and sizes the records for `steps` steps of (batch, seq).
  // kIoError naming the directory when it cannot be made.
  static Result<DebugDump> create(const std::string& dir, const Gpt2& model, int steps);

  // Writes DIR/weights0.safetensors from the model's current parameters.
  Status write_initial_weights(const Gpt2& model) const;

  // Step `step`'s (1-based) batch and loss. REQUIRES: step <= steps.
  void record_batch(int step, std::span<const int32_t> inputs, std::span<const int32_t> targets);
  void record_loss(int step, float loss);
  // Step 1's logits (call after its forward, before its backward) and gradients (after the
  // backward, before the optimizer).
  void record_logits(const Gpt2& model);
  void record_grads(const Gpt2& model);

  // Writes DIR/steps.safetensors with the first `steps_done` steps.
  Status write_steps(const Gpt2& model, int steps_done) const;

 private:
  DebugDump() = default;

  std::string dir_;
  int steps_ = 0;
  int64_t batch_ = 0, seq_ = 0, vocab_ = 0;
  std::vector<int32_t> inputs_;   // (S, B, T)
  std::vector<int32_t> targets_;  // (S, B, T)
  std::vector<float> logits_;     // (B, T, V)
  std::vector<float> losses_;     // (S)
  std::vector<float> grads_;      // the gradient arena of step 1
};

}  // namespace kiln::train

#endif  // KILN_TRAIN_TRAINER_DEBUG_DUMP_H_
