// Whether the kernel's OOM killer killed a process: read from the kernel log (/dev/kmsg), which
// says "Out of memory: Killed process PID (name) ..." or "Memory cgroup out of memory: Killed
// process PID ...". A rank killed by SIGKILL that nobody in Kiln sent is then an out-of-memory
// death, not a mystery (its error signature says so).
//
// Reading /dev/kmsg needs root or CAP_SYSLOG where kernel.dmesg_restrict is 1; without it the
// answer is "not known" (false), never an error that stops anything.
#ifndef KILN_SCHED_OOM_KILL_H_
#define KILN_SCHED_OOM_KILL_H_

#include <sys/types.h>

#include <cstdint>
#include <string_view>

namespace kiln::sched {

// One /dev/kmsg record ("PRIO,SEQ,USEC,FLAGS;text") names an OOM kill of `pid` at or after
// `since_us` (microseconds since boot, the record's clock). Pure.
bool kmsg_names_oom_kill(std::string_view record, pid_t pid, uint64_t since_us);

// Reads the kernel log (at most kmsg_bytes_max bytes of it, without blocking) for an OOM kill
// of `pid` at or after `since_us`. False when there is none or the log cannot be read.
bool oom_killed(pid_t pid, uint64_t since_us, size_t kmsg_bytes_max = size_t{8} << 20);

// Now on the kernel log's clock (CLOCK_MONOTONIC, in microseconds): a rank's start, to compare
// with records.
uint64_t kmsg_clock_us();

}  // namespace kiln::sched

#endif  // KILN_SCHED_OOM_KILL_H_
