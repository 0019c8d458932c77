// The live progress line of `kiln train` on a terminal:
//
//   step 12/300 | loss 6.123 | val 6.201 | 1234 tok/s | 210 ms/step | ETA 1m02s
//
// Live (a terminal): redrawn in place ('\r', padded over the previous text) at most once per
// kProgressRedrawIntervalNs; a step that validated and the last step are always drawn and kept
// with a newline, so the terminal keeps a line per validation. Not live (a file or a pipe): only
// those kept lines, without '\r'. `val -` until the first validation.
// Formatting uses a fixed buffer: drawing allocates nothing.
#ifndef KILN_TRAIN_TRAINER_PROGRESS_H_
#define KILN_TRAIN_TRAINER_PROGRESS_H_

#include <kiln/train/trainer.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <span>
#include <string_view>

namespace kiln::train {

// Four redraws a second read as live without costing anything measurable.
inline constexpr int64_t kProgressRedrawIntervalNs = 250'000'000;
// The longest line format_progress_line() can produce with every field at its widest.
inline constexpr size_t kProgressLineMax = 160;

// "45s", "1m02s", "3h07m" (whole seconds, rounded up; "-" when not finite or negative).
std::string_view format_eta(double seconds, std::span<char> buf);

// The line's text (no '\r', no newline) for `report`; `val_loss` is shown when has_val.
std::string_view format_progress_line(const StepReport& report, bool has_val, float val_loss,
                                      double eta_s, std::span<char> buf);

class ProgressLine {
 public:
  // `out` may be null (draws nothing).
  ProgressLine(std::ostream* out, bool live) : out_(out), live_(live) {}

  // Draws `report` if it is due (see above); `now_ns` is monotonic time.
  void update(const StepReport& report, double eta_s, int64_t now_ns);

 private:
  std::ostream* out_;
  bool live_;
  bool drawn_once_ = false;
  int64_t last_draw_ns_ = 0;
  size_t drawn_chars_ = 0;  // of the line currently on screen (0 after a newline)
  bool has_val_ = false;
  float val_loss_ = 0;
  std::array<char, kProgressLineMax> line_{};
};

}  // namespace kiln::train

#endif  // KILN_TRAIN_TRAINER_PROGRESS_H_
