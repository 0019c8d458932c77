// Test support for kiln_ckpt's unit tests: whole-file reads and writes, byte flips, a small
// training-like state, and a gate that holds a writer thread in place. Tests only.
#ifndef KILN_CKPT_TESTING_CKPT_TESTING_H_
#define KILN_CKPT_TESTING_CKPT_TESTING_H_

#include <kiln/ckpt/safetensors.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::ckpt::testing {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// XORs one byte of the file at `offset` (from the end when negative) with 0x01.
inline void flip_byte(const std::string& path, int64_t offset) {
  std::string bytes = read_file(path);
  const size_t at =
      offset >= 0 ? static_cast<size_t>(offset) : bytes.size() - static_cast<size_t>(-offset);
  bytes[at] = static_cast<char>(bytes[at] ^ 0x01);
  write_file(path, bytes);
}

// A stand-in for a model's state: weights (f32), a step counter (i64) and a few bytes (u8), with
// values that depend on `seed` so different checkpoints differ.
struct State {
  std::vector<float> weights;
  std::vector<int64_t> counter;
  std::vector<uint8_t> bytes;

  explicit State(int seed, size_t n = 1000) : weights(n), counter(2), bytes(13) {
    for (size_t i = 0; i < n; ++i)
      weights[i] = static_cast<float>(seed) + static_cast<float>(i) * 0.25f;
    counter = {seed, -seed};
    for (size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<uint8_t>(seed + static_cast<int>(i));
  }

  std::vector<TensorRef> refs() const {
    return {{"weights", DType::kF32, {static_cast<int64_t>(weights.size())}, weights.data()},
            {"counter", DType::kI64, {2}, counter.data()},
            {"bytes", DType::kU8, {13}, bytes.data()}};
  }
};

// Holds every thread that calls wait() until open() (or 30 s, so a broken test fails instead of
// hanging), and counts arrivals.
class Gate {
 public:
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    ++arrived_;
    cv_.notify_all();
    cv_.wait_for(lock, std::chrono::seconds(30), [this] { return open_; });
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // True once `n` threads have arrived (waits up to 30 s).
  bool wait_arrived(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return arrived_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int arrived_ = 0;
};

}  // namespace kiln::ckpt::testing

#endif  // KILN_CKPT_TESTING_CKPT_TESTING_H_
