/* Shared pieces of the peer allreduce harnesses (mpi_allreduce_bench.cc, gloo_allreduce_bench.cc).

   These harnesses are standalone peer benchmarks built by bench/comm/run with the peer's own
   compiler wrapper, so they use only the standard library, never kiln_* libraries.

   What they share, so that every peer is measured and checked the same way, and the same way as
   `kiln comm-bench` (src/comm/bench.cc):
   - the flags --min-bytes --max-bytes --iters --warmup --inplace --outofplace --json
     --check-bytes-max and their limits;
   - the input pattern ((i*7 + rank*13) % 61) - 30: small integers, so a sum over up to
     kWorldSizeMax ranks is exact in f32 whatever the reduction order, and the expected result can
     be compared with ==;
   - the timing: ops run back to back in batches; each op of a batch has its own buffers (a
     "slot", at most check_bytes_max bytes of them over all ranks, as in Kiln), re-initialised
     before the batch and checked after it, both outside the timed region; every batch starts
     with an untimed barrier;
   - the JSON line {"peer","op","bytes","ranks","mode","time_us","algbw_GBps","busbw_GBps",
     "correct"} and the nccl-tests conventions: time_us = mean per-op time of the timed ops,
     the slowest rank's; algbw = bytes / time; busbw = algbw * 2(n-1)/n.

   Invariant: a size is a positive multiple of sizeof(float); sizes run from min_bytes doubling
   up to max_bytes. */
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln_bench {

// Largest message: each rank holds at least four buffers of this size (input template, expected
// result, one slot's send and receive buffers); 1 GiB keeps two ranks under 8 GiB of 24 GiB.
inline constexpr uint64_t kBytesMax = uint64_t{1} << 30;
// Bounds on the iteration counts: at least one timed op, and a cap that keeps a latency run
// (about 1 us per op plus a barrier) under a minute even with a typo in the count.
inline constexpr uint64_t kItersMax = 10'000'000;
// The input pattern's period and offset: values in [-30, 30].
inline constexpr int64_t kPatternPeriod = 61;
inline constexpr int64_t kPatternOffset = 30;
// With |value| <= 30, a sum over this many ranks stays below 2^24, where f32 is exact for every
// integer: 30 * 4096 = 122880 < 16777216. More ranks than this never run on one host here.
inline constexpr int kWorldSizeMax = 4096;
static_assert(kPatternOffset * kWorldSizeMax < (int64_t{1} << 24));

enum class Mode { kOutOfPlace, kInPlace };

inline const char* mode_name(Mode mode) {
  return mode == Mode::kInPlace ? "inplace" : "outofplace";
}

// Kiln's comm-bench default for the memory that holds one batch's slots (BenchOptions::
// check_bytes_max in include/kiln/comm/bench.h); the same default times peers the same way.
inline constexpr uint64_t kCheckBytesMaxDefault = uint64_t{256} << 20;
// Upper bound for --check-bytes-max: the slots take twice this over all ranks (send and receive
// buffers), so 4 GiB means 8 GiB, which fits in the 24 GiB machine.
inline constexpr uint64_t kCheckBytesMaxLimit = uint64_t{4} << 30;

struct BenchOptions {
  uint64_t min_bytes = 8;                   // first size; the README's latency row
  uint64_t max_bytes = uint64_t{64} << 20;  // last size: 64 MiB, past every cache on this host
  uint64_t iters = 20;                      // timed ops per size
  uint64_t warmup = 5;                      // untimed ops per size, run first
  uint64_t check_bytes_max = kCheckBytesMaxDefault;  // bytes x ranks x slots of one batch
  std::vector<Mode> modes;  // in the order given; out of place when none given
  bool json = false;        // one JSON object per line instead of a text table
};

// Parses a non-negative decimal integer; false when `text` is not one.
inline bool parse_u64(std::string_view text, uint64_t* value) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  return ec == std::errc() && ptr == end;
}

// Reads the value of flag `argv[*i]` ("--name V" or "--name=V"), advancing *i past it.
// Returns false, with a message in *error, when the value is missing.
inline bool flag_value(int argc, char** argv, int* i, std::string_view name,
                       std::string_view* value, std::string* error) {
  std::string_view arg = argv[*i];
  if (arg.size() > name.size() && arg[name.size()] == '=') {
    *value = arg.substr(name.size() + 1);
    return true;
  }
  if (*i + 1 >= argc) {
    *error = std::string(name) + " needs a value";
    return false;
  }
  *i += 1;
  *value = argv[*i];
  return true;
}

// True when argv[i] is `name` or starts with `name=`.
inline bool is_flag(std::string_view arg, std::string_view name) {
  return arg == name || (arg.size() > name.size() && arg.substr(0, name.size()) == name &&
                         arg[name.size()] == '=');
}

// Parses one shared flag at argv[*i]. Returns 1 when consumed, 0 when the flag is not a shared
// one (the caller may know it), -1 on a bad value (message in *error).
inline int parse_common_flag(int argc, char** argv, int* i, BenchOptions* options,
                             std::string* error) {
  std::string_view arg = argv[*i];
  if (arg == "--json") {
    options->json = true;
    return 1;
  }
  if (arg == "--inplace" || arg == "--outofplace") {
    options->modes.push_back(arg == "--inplace" ? Mode::kInPlace : Mode::kOutOfPlace);
    return 1;
  }
  struct Numeric {
    std::string_view name;
    uint64_t* target;
    uint64_t max;
  };
  const Numeric numerics[] = {
      {"--min-bytes", &options->min_bytes, kBytesMax},
      {"--max-bytes", &options->max_bytes, kBytesMax},
      {"--iters", &options->iters, kItersMax},
      {"--warmup", &options->warmup, kItersMax},
      {"--check-bytes-max", &options->check_bytes_max, kCheckBytesMaxLimit}};
  for (const Numeric& numeric : numerics) {
    if (!is_flag(arg, numeric.name)) continue;
    std::string_view value;
    if (!flag_value(argc, argv, i, numeric.name, &value, error)) return -1;
    if (!parse_u64(value, numeric.target)) {
      *error = std::string(numeric.name) + ": '" + std::string(value) +
               "' is not a non-negative integer";
      return -1;
    }
    if (*numeric.target > numeric.max) {
      *error = std::string(numeric.name) + " " + std::string(value) + " is over the limit " +
               std::to_string(numeric.max);
      return -1;
    }
    return 1;
  }
  return 0;
}

// Checks the relations between the shared options; returns an empty string when they hold.
inline std::string validate(BenchOptions* options) {
  if (options->modes.empty()) options->modes.push_back(Mode::kOutOfPlace);
  for (uint64_t bytes : {options->min_bytes, options->max_bytes}) {
    if (bytes == 0 || bytes % sizeof(float) != 0) {
      return "sizes must be positive multiples of " + std::to_string(sizeof(float)) +
             " bytes (f32); got " + std::to_string(bytes);
    }
  }
  if (options->min_bytes > options->max_bytes) {
    return "--min-bytes " + std::to_string(options->min_bytes) + " is above --max-bytes " +
           std::to_string(options->max_bytes);
  }
  if (options->iters < 1) return "--iters must be at least 1";
  return "";
}

// The sizes to run: min_bytes doubling while <= max_bytes.
inline std::vector<uint64_t> sizes_of(const BenchOptions& options) {
  std::vector<uint64_t> sizes;
  for (uint64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 2) {
    sizes.push_back(bytes);
  }
  return sizes;
}

inline float input_value(uint64_t index, int rank) {
  const int64_t raw = static_cast<int64_t>((index * 7 + static_cast<uint64_t>(rank) * 13) %
                                           static_cast<uint64_t>(kPatternPeriod));
  return static_cast<float>(raw - kPatternOffset);
}

inline void fill_input(std::span<float> data, int rank) {
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = input_value(i, rank);
}

// The exact sum over ranks 0..world_size-1 of every element.
inline void fill_expected(std::span<float> data, int world_size) {
  for (size_t i = 0; i < data.size(); ++i) {
    int64_t sum = 0;
    for (int r = 0; r < world_size; ++r)
      sum += static_cast<int64_t>(input_value(i, r));
    data[i] = static_cast<float>(sum);
  }
}

// Before an out-of-place op the output is set to NaN, so an op that writes nothing fails.
inline void poison(std::span<float> data) {
  for (float& x : data)
    x = std::numeric_limits<float>::quiet_NaN();
}

inline bool equal_exactly(std::span<const float> got, std::span<const float> expected) {
  if (got.size() != expected.size()) return false;
  bool equal = true;
  for (size_t i = 0; i < got.size(); ++i)
    equal &= got[i] == expected[i];
  return equal;
}

// Ops per batch at one size, Kiln's rule: as many slots (one op's buffers on every rank) as fit
// in check_bytes_max, at least 1 and at most iters. 8 B: every op in one batch; 1 MiB at 2
// ranks: 128; 64 MiB: 2.
inline uint64_t slots_for(uint64_t bytes, int world_size, uint64_t iters,
                          uint64_t check_bytes_max) {
  const uint64_t per_op_bytes = bytes * static_cast<uint64_t>(world_size);
  return std::clamp<uint64_t>(check_bytes_max / per_op_bytes, 1, iters);
}

// The buffers of one size on one rank: the input template, the expected sum, and one send and
// one receive buffer per slot. Allocated per size; every byte is written by reset() before any
// op reads it, outside the timed region.
struct SizeBuffers {
  explicit SizeBuffers(uint64_t bytes, uint64_t slots, int rank, int world_size)
      : count(bytes / sizeof(float)), input(count), expected(count) {
    fill_input(input, rank);
    fill_expected(expected, world_size);
    send.reserve(slots);
    recv.reserve(slots);
    for (uint64_t k = 0; k < slots; ++k) {
      send.emplace_back(count);
      recv.emplace_back(count);
    }
  }

  // Readies slot k for one op, as Kiln's comm-bench does: a fresh copy of the input in its send
  // buffer (in place, the op reduces into it) and NaN in its receive buffer, so that an
  // out-of-place op that writes nothing fails the check.
  void reset(size_t k) {
    std::memcpy(send[k].data(), input.data(), count * sizeof(float));
    poison(recv[k]);
  }

  // The slot's result: the send buffer in place, the receive buffer out of place.
  std::span<float> result(size_t k, Mode mode) {
    return mode == Mode::kInPlace ? std::span<float>(send[k]) : std::span<float>(recv[k]);
  }

  bool check(size_t k, Mode mode) { return equal_exactly(result(k, mode), expected); }

  size_t count;                          // f32 elements per buffer
  std::vector<float> input;              // (count) this rank's contribution
  std::vector<float> expected;           // (count) the exact sum over ranks
  std::vector<std::vector<float>> send;  // (slots, count) op input; the result in place
  std::vector<std::vector<float>> recv;  // (slots, count) the result out of place
};

// nccl-tests' bus bandwidth factor for allreduce: each rank sends and receives 2(n-1)/n of the
// buffer, so busbw is comparable with a link's bandwidth whatever n is.
inline double allreduce_bus_factor(int world_size) {
  return world_size <= 1 ? 0.0 : 2.0 * (world_size - 1) / world_size;
}

// One result line: JSON (nccl-tests fields plus peer and mode) or a fixed-width text row.
// `time_us` is the mean per-op time, the slowest rank's.
inline std::string result_line(const char* peer, uint64_t bytes, int world_size, Mode mode,
                               double time_us, bool correct, bool json) {
  const double algbw_gbps = time_us > 0 ? static_cast<double>(bytes) / (time_us * 1e3) : 0.0;
  const double busbw_gbps = algbw_gbps * allreduce_bus_factor(world_size);
  char line[512];  // the longest line is about 200 characters
  if (json) {
    std::snprintf(line, sizeof line,
                  "{\"peer\":\"%s\",\"op\":\"allreduce\",\"bytes\":%llu,\"ranks\":%d,"
                  "\"mode\":\"%s\",\"time_us\":%.4f,\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f,"
                  "\"correct\":%s}",
                  peer, static_cast<unsigned long long>(bytes), world_size, mode_name(mode),
                  time_us, algbw_gbps, busbw_gbps, correct ? "true" : "false");
  } else {
    std::snprintf(line, sizeof line, "%-8s %12llu %5d %-10s %12.3f %10.3f %10.3f %s", peer,
                  static_cast<unsigned long long>(bytes), world_size, mode_name(mode), time_us,
                  algbw_gbps, busbw_gbps, correct ? "ok" : "WRONG");
  }
  return line;
}

inline const char* text_header() {
  return "peer            bytes ranks mode            time_us  algbw_GB/s busbw_GB/s check";
}

inline const char* common_usage() {
  return "  --min-bytes B    first size in bytes (multiple of 4; default 8)\n"
         "  --max-bytes B    last size; sizes double from min to max (default 67108864)\n"
         "  --iters N        timed ops per size (default 20)\n"
         "  --warmup N       untimed ops per size before timing (default 5)\n"
         "  --inplace        run in place; with --outofplace too, both run, in flag order\n"
         "  --outofplace     run out of place (the default)\n"
         "  --check-bytes-max B  memory for one batch's per-op buffers, all ranks (default\n"
         "                   268435456, as kiln comm-bench)\n"
         "  --json           one JSON object per size and mode\n";
}

}  // namespace kiln_bench
