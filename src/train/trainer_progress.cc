// See trainer_progress.h.
#include "train/trainer_progress.h"

#include <cmath>
#include <cstdio>
#include <ostream>

namespace kiln::train {
namespace {

std::string_view written(std::span<char> buf, int n) {
  if (n < 0) return {};
  return std::string_view(buf.data(), std::min(static_cast<size_t>(n), buf.size() - 1));
}

}  // namespace

std::string_view format_eta(double seconds, std::span<char> buf) {
  if (!std::isfinite(seconds) || seconds < 0)
    return written(buf, std::snprintf(buf.data(), buf.size(), "-"));
  // Beyond ten thousand hours the number means nothing; show the cap rather than overflow.
  constexpr double kSecondsMax = 3600.0 * 10000;
  const auto total = static_cast<int64_t>(std::ceil(std::min(seconds, kSecondsMax)));
  const int64_t h = total / 3600, m = (total % 3600) / 60, s = total % 60;
  int n;
  if (h > 0) {
    n = std::snprintf(buf.data(), buf.size(), "%lldh%02lldm", static_cast<long long>(h),
                      static_cast<long long>(m));
  } else if (m > 0) {
    n = std::snprintf(buf.data(), buf.size(), "%lldm%02llds", static_cast<long long>(m),
                      static_cast<long long>(s));
  } else {
    n = std::snprintf(buf.data(), buf.size(), "%llds", static_cast<long long>(s));
  }
  return written(buf, n);
}

std::string_view format_progress_line(const StepReport& r, bool has_val, float val_loss,
                                      double eta_s, std::span<char> buf) {
  std::array<char, 16> eta{};
  std::array<char, 24> val{};
  const std::string_view eta_text = format_eta(eta_s, eta);
  const std::string_view val_text = has_val
                                        ? written(val, std::snprintf(val.data(), val.size(), "%.3f",
                                                                     static_cast<double>(val_loss)))
                                        : std::string_view("-");
  const int n = std::snprintf(
      buf.data(), buf.size(),
      "step %d/%d | loss %.3f | val %.*s | %.0f tok/s | %.0f ms/step | ETA %.*s", r.step,
      r.max_steps, static_cast<double>(r.loss), static_cast<int>(val_text.size()), val_text.data(),
      r.tokens_per_s, r.step_ms, static_cast<int>(eta_text.size()), eta_text.data());
  return written(buf, n);
}

void ProgressLine::update(const StepReport& report, double eta_s, int64_t now_ns) {
  if (out_ == nullptr) return;
  if (report.validated) {
    has_val_ = true;
    val_loss_ = report.val_loss;
  }
  const bool keep = report.validated || report.step >= report.max_steps;
  if (!keep && (!live_ || (drawn_once_ && now_ns - last_draw_ns_ < kProgressRedrawIntervalNs))) {
    return;
  }
  const std::string_view text = format_progress_line(report, has_val_, val_loss_, eta_s, line_);
  if (live_) *out_ << '\r';
  *out_ << text;
  // Blank out what is left of a longer previous line.
  for (size_t i = text.size(); i < drawn_chars_; ++i)
    *out_ << ' ';
  drawn_chars_ = text.size();
  if (keep) {
    *out_ << '\n';
    drawn_chars_ = 0;
  }
  out_->flush();
  drawn_once_ = true;
  last_draw_ns_ = now_ns;
}

}  // namespace kiln::train
