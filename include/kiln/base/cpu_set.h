// CpuSet: a set of logical CPU numbers, as Linux's cpulist format writes it ("0-3,8,10-11"), and
// binding the calling thread to one.
//
// A thread created after its creator was bound inherits the binding, and so does a process
// spawned from it: the launcher binds a rank by spawning it from a thread bound to the rank's
// CPUs (no window in which the rank runs unbound).
#ifndef KILN_BASE_CPU_SET_H_
#define KILN_BASE_CPU_SET_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln {

class CpuSet {
 public:
  // Limits: CPU numbers are below kCpuMax (Linux's largest CONFIG_NR_CPUS is 8192), and a list
  // to parse is at most kListCharsMax characters (every CPU of kCpuMax written out fits).
  static constexpr int kCpuMax = 8192;
  static constexpr size_t kListCharsMax = 64 << 10;

  CpuSet() = default;
  // REQUIRES: every cpu in [0, kCpuMax).
  explicit CpuSet(std::vector<int> cpus);

  // "0-3,8,10-11" (whitespace around items allowed; an empty string is the empty set). Errors
  // say what is wrong and quote the text: "cpu list '3-1': range end 1 is below its start 3".
  static Result<CpuSet> parse(std::string_view list);
  // The CPUs the calling thread may run on (sched_getaffinity).
  static Result<CpuSet> of_this_thread();

  // Canonical cpulist form: ascending, ranges merged ("0-3,8").
  std::string to_string() const;
  const std::vector<int>& cpus() const { return cpus_; }  // ascending, unique
  int size() const { return static_cast<int>(cpus_.size()); }
  bool empty() const { return cpus_.empty(); }
  bool contains(int cpu) const;
  // The CPUs in both.
  CpuSet intersect(const CpuSet& other) const;
  bool operator==(const CpuSet& other) const = default;

 private:
  std::vector<int> cpus_;
};

// Binds the calling thread to `cpus` (sched_setaffinity). kInvalidArgument for an empty set;
// kIoError with the kernel's reason otherwise (a CPU outside the cgroup's cpuset, say).
Status bind_this_thread(const CpuSet& cpus);

}  // namespace kiln

#endif  // KILN_BASE_CPU_SET_H_
