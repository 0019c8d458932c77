// The kernel log's word on OOM kills (kiln/sched/oom_kill.h).
#include <kiln/sched/oom_kill.h>

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string>

namespace kiln::sched {

bool kmsg_names_oom_kill(std::string_view record, pid_t pid, uint64_t since_us) {
  // "PRIO,SEQ,USEC,FLAGS;text": the third field is the record's time.
  const size_t semi = record.find(';');
  if (semi == std::string_view::npos) return false;
  const std::string_view prefix = record.substr(0, semi);
  const size_t c1 = prefix.find(',');
  const size_t c2 = c1 == std::string_view::npos ? c1 : prefix.find(',', c1 + 1);
  const size_t c3 = c2 == std::string_view::npos ? c2 : prefix.find(',', c2 + 1);
  if (c2 == std::string_view::npos) return false;
  const std::string_view usec_text =
      prefix.substr(c2 + 1, (c3 == std::string_view::npos ? prefix.size() : c3) - c2 - 1);
  uint64_t usec = 0;
  const auto [ptr, ec] =
      std::from_chars(usec_text.data(), usec_text.data() + usec_text.size(), usec);
  if (ec != std::errc() || usec < since_us) return false;
  const std::string_view text = record.substr(semi + 1);
  const std::string needle = "Killed process " + std::to_string(pid) + " ";
  // "Out of memory: Killed process" (the whole machine) or "Memory cgroup out of memory: ...".
  return (text.find("Out of memory") != std::string_view::npos ||
          text.find("out of memory") != std::string_view::npos) &&
         text.find(needle) != std::string_view::npos;
}

bool oom_killed(pid_t pid, uint64_t since_us, size_t kmsg_bytes_max) {
  const int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  // Each read returns one record; a record longer than the buffer is EINVAL (skipped), EPIPE
  // says records were overwritten while reading (go on), EAGAIN is the end.
  char buf[8192];
  size_t total = 0;
  bool found = false;
  while (!found && total < kmsg_bytes_max) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      total += static_cast<size_t>(n);
      found = kmsg_names_oom_kill(std::string_view(buf, static_cast<size_t>(n)), pid, since_us);
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EPIPE || errno == EINVAL)) continue;
    break;  // EAGAIN (the end), or an error: stop
  }
  close(fd);
  return found;
}

uint64_t kmsg_clock_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

}  // namespace kiln::sched
