// See trainer_json.h.
#include "train/trainer_json.h"

#include <kiln/base/check.h>

#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace kiln::train {
namespace {

// Appends to a fixed buffer; KILN_CHECKs that it fits (kStepJsonMax is sized for the worst case).
class FixedWriter {
 public:
  explicit FixedWriter(std::span<char> buf) : buf_(buf) {}

  void text(std::string_view s) {
    KILN_CHECK(size_ + s.size() <= buf_.size()) << "JSON line longer than " << buf_.size();
    std::memcpy(buf_.data() + size_, s.data(), s.size());
    size_ += s.size();
  }
  template <typename T>
  void number(T value) {
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(value)) {
        text("null");
        return;
      }
    }
    auto [end, ec] = std::to_chars(buf_.data() + size_, buf_.data() + buf_.size(), value);
    KILN_CHECK(ec == std::errc()) << "JSON line longer than " << buf_.size();
    size_ = static_cast<size_t>(end - buf_.data());
  }
  template <typename T>
  void field(std::string_view key, T value, bool first = false) {
    text(first ? "{\"" : ",\"");
    text(key);
    text("\":");
    number(value);
  }
  std::string_view view() const { return {buf_.data(), size_}; }

 private:
  std::span<char> buf_;
  size_t size_ = 0;
};

}  // namespace

std::string_view format_step_json(const StepReport& r, std::span<char> buf) {
  KILN_CHECK(buf.size() >= kStepJsonMax) << "buffer of " << buf.size();
  FixedWriter w(buf);
  w.field("step", r.step, /*first=*/true);
  w.field("loss", r.loss);
  w.field("lr", r.lr);
  w.field("grad_norm", r.grad_norm);
  w.field("tokens_per_s", r.tokens_per_s);
  w.field("step_ms", r.step_ms);
  w.field("mfu", r.mfu);
  w.field("world", r.world);
  w.field("comm_exposed_ms", r.comm_exposed_ms);
  w.field("ckpt_stall_ms", r.ckpt_stall_ms);
  if (r.validated) w.field("val_loss", r.val_loss);
  w.text("}");
  return w.view();
}

std::string format_done_json(const TrainSummary& s) {
  std::array<char, kStepJsonMax> buf{};
  FixedWriter w(buf);
  w.text("{\"event\":\"done\"");
  w.field("steps", s.steps);
  w.field("train_loss", s.train_loss);
  w.field("val_loss", s.val_loss);
  w.field("tokens_per_s", s.tokens_per_s);
  w.field("peak_rss_bytes", s.peak_rss_bytes);
  if (s.stopped) w.text(",\"stopped\":true");
  w.text(s.precision == Precision::kBf16 ? ",\"precision\":\"bf16\"" : ",\"precision\":\"fp32\"");
  w.text("}");
  std::string line(w.view());
  // Hex digits only (the caller's hash): nothing to escape.
  if (!s.config_sha256.empty()) {
    line.insert(line.size() - 1, ",\"config_sha256\":\"" + s.config_sha256 + "\"");
  }
  return line;
}

std::string_view format_progress_json(const StepReport& r, std::span<char> buf) {
  KILN_CHECK(buf.size() >= kProgressLineBytesMax) << "buffer of " << buf.size();
  FixedWriter w(buf);
  w.field("step", r.step, /*first=*/true);
  w.field("step_ms", r.step_ms);
  w.field("loss", r.loss);
  w.field("tokens_per_s", r.tokens_per_s);
  w.field("comm_exposed_ms", r.comm_exposed_ms);
  w.field("lr", r.lr);
  w.field("mfu", r.mfu);
  w.field("ckpt_stall_ms", r.ckpt_stall_ms);
  if (r.validated) w.field("val_loss", r.val_loss);
  w.text("}\n");
  return w.view();
}

std::string_view format_progress_done_json(const TrainSummary& s, std::span<char> buf) {
  KILN_CHECK(buf.size() >= kProgressLineBytesMax) << "buffer of " << buf.size();
  FixedWriter w(buf);
  w.text("{\"event\":\"done\"");
  w.field("steps", s.steps);
  w.text(s.stopped ? ",\"stopped\":true}\n" : ",\"stopped\":false}\n");
  return w.view();
}

}  // namespace kiln::train
