// What the trainer's tests share: the SOTU shards, a small GPT-2 config, options without the
// matmul probe, a float's bits.
#ifndef KILN_TRAIN_TRAINER_TEST_UTIL_H_
#define KILN_TRAIN_TRAINER_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <string>

#include <kiln/train/train_config.h>
#include <kiln/train/trainer.h>

namespace kiln::train::testing {

inline const std::string kTrainDir = std::string(KILN_SOURCE_DIR) + "/data/sotu/train";
inline const std::string kValDir = std::string(KILN_SOURCE_DIR) + "/data/sotu/val";

// A 2-layer GPT-2 over the full GPT-2 vocabulary: small enough for a few steps a second on two
// cores, real enough to learn (most of its parameters are the embedding).
inline TrainConfig small_config(int max_steps) {
  TrainConfig c;
  c.source = "trainer_test";
  c.model = ModelConfig{2, 2, 64, 64, 50257};
  c.data = {kTrainDir, kValDir};
  c.train.batch = 4;
  c.train.seq = 64;
  c.train.max_steps = max_steps;
  c.train.lr = 3e-3;
  c.train.min_lr = 3e-4;
  c.train.warmup_steps = 5;
  c.train.val_every = 0;
  c.train.val_batches = 2;
  c.train.seed = 1337;
  c.train.threads = 2;
  return c;
}

// Skips the ~0.5 s matmul probe where MFU does not matter.
inline TrainerOptions quiet_options() {
  TrainerOptions o;
  o.peak_gflops = 100;
  return o;
}

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace kiln::train::testing

#endif  // KILN_TRAIN_TRAINER_TEST_UTIL_H_
