// The learning-rate schedule of llm.c's train_gpt2: a linear warmup, then a cosine decay.
//
//   step s in [1, warmup]:        lr * s / warmup              (lr / warmup at step 1, lr at
//   warmup) step s in (warmup, max]:      min_lr + (lr - min_lr) * (1 + cos(pi * r)) / 2,
//                                 r = (s - warmup) / (max - warmup)   (lr just after warmup,
//                                                                      min_lr at max_steps)
//
// Steps count from 1 (the first optimizer step). warmup_steps == 0 starts the cosine at once;
// warmup_steps >= max_steps makes the whole run warmup (a run cut short by --max-steps).
#ifndef KILN_TRAIN_SCHEDULE_H_
#define KILN_TRAIN_SCHEDULE_H_

namespace kiln::train {

struct LrSchedule {
  double lr = 0;
  double min_lr = 0;
  int warmup_steps = 0;
  int max_steps = 1;
};

// The learning rate of optimizer step `step` (1-based). REQUIRES: 1 <= step, max_steps >= 1.
double learning_rate(const LrSchedule& schedule, int step);

}  // namespace kiln::train

#endif  // KILN_TRAIN_SCHEDULE_H_
