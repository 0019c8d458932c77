// See include/kiln/base/cpu_set.h.
#include <kiln/base/check.h>
#include <kiln/base/cpu_set.h>

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <memory>

namespace kiln {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

Status bad_list(std::string_view list, const std::string& why) {
  return Status::invalid_argument("cpu list '" + std::string(list) + "': " + why);
}

// A CPU number: decimal digits only, below kCpuMax.
Result<int> parse_cpu(std::string_view list, std::string_view text) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != end || value < 0) {
    return bad_list(list, "'" + std::string(text) + "' is not a CPU number");
  }
  if (ec == std::errc::result_out_of_range || value >= CpuSet::kCpuMax) {
    return bad_list(list, "CPU " + std::string(text) + " is out of range [0, " +
                              std::to_string(CpuSet::kCpuMax) + ")");
  }
  return value;
}

// A cpu_set_t sized for kCpuMax CPUs (the fixed cpu_set_t holds only 1024).
struct DynamicCpuSet {
  DynamicCpuSet() : set(CPU_ALLOC(CpuSet::kCpuMax)), bytes(CPU_ALLOC_SIZE(CpuSet::kCpuMax)) {
    KILN_CHECK(set != nullptr);
    CPU_ZERO_S(bytes, set);
  }
  ~DynamicCpuSet() { CPU_FREE(set); }
  DynamicCpuSet(const DynamicCpuSet&) = delete;
  DynamicCpuSet& operator=(const DynamicCpuSet&) = delete;
  cpu_set_t* set;
  size_t bytes;
};

}  // namespace

CpuSet::CpuSet(std::vector<int> cpus) : cpus_(std::move(cpus)) {
  std::sort(cpus_.begin(), cpus_.end());
  cpus_.erase(std::unique(cpus_.begin(), cpus_.end()), cpus_.end());
  for (int cpu : cpus_)
    KILN_CHECK(cpu >= 0 && cpu < kCpuMax) << "cpu " << cpu;
}

Result<CpuSet> CpuSet::parse(std::string_view list) {
  if (list.size() > kListCharsMax) {
    return Status::invalid_argument("cpu list of " + std::to_string(list.size()) +
                                    " characters is longer than " + std::to_string(kListCharsMax));
  }
  // A bitmap of kCpuMax bits: a range sets whole words, so a list of thousands of full ranges
  // costs thousands of kCpuMax / 64 word writes, not thousands of kCpuMax insertions.
  constexpr int kWordBits = 64;
  std::vector<uint64_t> words(kCpuMax / kWordBits, 0);
  const auto set_range = [&words](int first, int last) {  // inclusive
    for (int w = first / kWordBits; w <= last / kWordBits; ++w) {
      const int lo = std::max(first, w * kWordBits) - w * kWordBits;
      const int hi = std::min(last, w * kWordBits + kWordBits - 1) - w * kWordBits;
      const uint64_t upto_hi = hi == kWordBits - 1 ? ~uint64_t{0} : (uint64_t{1} << (hi + 1)) - 1;
      words[static_cast<size_t>(w)] |= upto_hi & ~((uint64_t{1} << lo) - 1);
    }
  };
  std::string_view rest = trim(list);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.empty()) return bad_list(list, "empty item");
    const size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      KILN_ASSIGN_OR_RETURN(int cpu, parse_cpu(list, item));
      set_range(cpu, cpu);
    } else {
      KILN_ASSIGN_OR_RETURN(int first, parse_cpu(list, trim(item.substr(0, dash))));
      KILN_ASSIGN_OR_RETURN(int last, parse_cpu(list, trim(item.substr(dash + 1))));
      if (last < first) {
        return bad_list(list, "range end " + std::to_string(last) + " is below its start " +
                                  std::to_string(first));
      }
      set_range(first, last);
    }
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu < kCpuMax; ++cpu) {
    if ((words[static_cast<size_t>(cpu / kWordBits)] >> (cpu % kWordBits)) & 1) cpus.push_back(cpu);
  }
  return CpuSet(std::move(cpus));
}

Result<CpuSet> CpuSet::of_this_thread() {
  DynamicCpuSet mask;
  if (sched_getaffinity(0, mask.bytes, mask.set) != 0) {
    return Status::io_error(std::string("sched_getaffinity: ") + std::strerror(errno));
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu < kCpuMax; ++cpu) {
    if (CPU_ISSET_S(static_cast<size_t>(cpu), mask.bytes, mask.set)) cpus.push_back(cpu);
  }
  return CpuSet(std::move(cpus));
}

std::string CpuSet::to_string() const {
  std::string out;
  for (size_t i = 0; i < cpus_.size();) {
    size_t j = i;
    while (j + 1 < cpus_.size() && cpus_[j + 1] == cpus_[j] + 1)
      ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus_[i]);
    if (j > i) out += '-' + std::to_string(cpus_[j]);
    i = j + 1;
  }
  return out;
}

bool CpuSet::contains(int cpu) const {
  return std::binary_search(cpus_.begin(), cpus_.end(), cpu);
}

CpuSet CpuSet::intersect(const CpuSet& other) const {
  std::vector<int> both;
  std::set_intersection(cpus_.begin(), cpus_.end(), other.cpus_.begin(), other.cpus_.end(),
                        std::back_inserter(both));
  return CpuSet(std::move(both));
}

Status bind_this_thread(const CpuSet& cpus) {
  if (cpus.empty()) return Status::invalid_argument("cannot bind a thread to no CPU");
  DynamicCpuSet mask;
  for (int cpu : cpus.cpus())
    CPU_SET_S(static_cast<size_t>(cpu), mask.bytes, mask.set);
  if (sched_setaffinity(0, mask.bytes, mask.set) != 0) {
    return Status::io_error("binding to CPUs " + cpus.to_string() + ": " + std::strerror(errno));
  }
  return Status();
}

}  // namespace kiln
