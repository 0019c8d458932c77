// The JSON lines `kiln train --json` prints (see include/kiln/train/trainer.h):
//
//   {"step":12,"loss":6.1234,"lr":0.0006,"grad_norm":1.52,"tokens_per_s":1234.5,
//    "step_ms":210.3,"mfu":0.21}                                  (+ "val_loss" when validated)
//   {"event":"done","steps":300,"train_loss":3.2,"val_loss":3.9,"tokens_per_s":1250.1,
//    "peak_rss_bytes":812345344}                                  (+ "stopped":true when stopped,
//                                         "precision":"fp32" or "bf16",
//                                         "config_sha256":"9f86d0..." when the caller gave it)
//
// Numbers are written with std::to_chars (the shortest text that reads back to the same value);
// a value that is not finite (a diverged loss) is written as null, which JSON can carry. The step
// line is formatted into a caller's fixed buffer so the training loop allocates nothing.
#ifndef KILN_TRAIN_TRAINER_JSON_H_
#define KILN_TRAIN_TRAINER_JSON_H_

#include <kiln/train/trainer.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace kiln::train {

// Room for every field of a step line at its longest (8 numbers of at most 24 characters, the
// keys and punctuation), with margin.
inline constexpr size_t kStepJsonMax = 512;

// The step line without its newline, in `buf` (REQUIRES: buf.size() >= kStepJsonMax).
std::string_view format_step_json(const StepReport& report, std::span<char> buf);

// The final line, without its newline.
std::string format_done_json(const TrainSummary& summary);

// The node agent's progress lines (TrainerOptions::progress_fd), each with its newline, in `buf`
// (REQUIRES: buf.size() >= kProgressLineBytesMax):
//   {"step":N,"step_ms":X,"loss":Y,"tokens_per_s":Z,"comm_exposed_ms":C,"lr":L,"mfu":M,
//    "ckpt_stall_ms":S[,"val_loss":V]}                                  (val_loss when validated)
//   {"event":"done","steps":N,"stopped":B}
std::string_view format_progress_json(const StepReport& report, std::span<char> buf);
std::string_view format_progress_done_json(const TrainSummary& summary, std::span<char> buf);

}  // namespace kiln::train

#endif  // KILN_TRAIN_TRAINER_JSON_H_
