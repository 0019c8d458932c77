// Reads /proc/self/stat, /proc/stat and /proc/self/fd. See process_collector.h.
//
// /proc/self/stat fields used (1-based, after the parenthesised command name, which may itself
// contain spaces and parentheses, so parsing starts after the last ')'):
//   14 utime, 15 stime (clock ticks), 20 num_threads, 22 starttime (ticks since boot),
//   23 vsize (bytes), 24 rss (pages).
#include "obs/process_collector.h"

#include <kiln/obs/metrics.h>

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace kiln::obs {
namespace {

// Seconds since the epoch at which the system booted (the "btime" line of /proc/stat), or -1.
double boot_time_seconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  while (in >> key) {
    if (key == "btime") {
      double btime = -1;
      in >> btime;
      return btime;
    }
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

int count_open_fds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int count = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // the descriptor opendir itself holds
}

}  // namespace

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  std::ifstream stat_file("/proc/self/stat");
  std::string stat;
  std::getline(stat_file, stat);
  const size_t close_paren = stat.rfind(')');
  if (close_paren != std::string::npos) {
    std::istringstream fields(stat.substr(close_paren + 2));
    // Field 3 (state) is the first after the name; collect fields 3..24.
    std::vector<std::string> f(25);
    for (int i = 3; i <= 24 && fields >> f[i]; ++i) {
    }
    const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
    const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
    try {
      const double cpu = (std::stod(f[14]) + std::stod(f[15])) / ticks;
      out.push_back(single_sample_family("process_cpu_seconds_total",
                                         "Total user and system CPU time spent in seconds.",
                                         MetricType::Counter, cpu));
      out.push_back(single_sample_family("process_threads", "Number of OS threads in the process.",
                                         MetricType::Gauge, std::stod(f[20])));
      const double boot = boot_time_seconds();
      if (boot >= 0) {
        out.push_back(single_sample_family("process_start_time_seconds",
                                           "Start time of the process since unix epoch in seconds.",
                                           MetricType::Gauge, boot + std::stod(f[22]) / ticks));
      }
      out.push_back(single_sample_family("process_virtual_memory_bytes",
                                         "Virtual memory size in bytes.", MetricType::Gauge,
                                         std::stod(f[23])));
      out.push_back(single_sample_family("process_resident_memory_bytes",
                                         "Resident memory size in bytes.", MetricType::Gauge,
                                         std::stod(f[24]) * page));
    } catch (const std::exception&) {
      // A malformed stat line: leave the stat-based series out of this scrape.
    }
  }
  const int fds = count_open_fds();
  if (fds >= 0) {
    out.push_back(single_sample_family("process_open_fds", "Number of open file descriptors.",
                                       MetricType::Gauge, fds));
  }
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    out.push_back(single_sample_family("process_max_fds",
                                       "Maximum number of open file descriptors.",
                                       MetricType::Gauge, static_cast<double>(limit.rlim_cur)));
  }
  return out;
}

}  // namespace kiln::obs
