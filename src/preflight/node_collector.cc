// See include/kiln/preflight/node_collector.h.
#include <kiln/obs/metrics.h>
#include <kiln/preflight/node_collector.h>

#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>

#include "preflight/proc_files.h"

namespace kiln::preflight {

std::vector<prometheus::MetricFamily> NodeCollector::Collect() const {
  using obs::single_sample_family;
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  out.push_back(single_sample_family("kiln_node_cpus", "Logical CPUs online.", MetricType::Gauge,
                                     static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN))));
  std::optional<std::string> loadavg = read_trimmed("/proc/loadavg");
  double load1 = 0;
  if (loadavg && std::sscanf(loadavg->c_str(), "%lf", &load1) == 1) {
    out.push_back(single_sample_family("kiln_node_load1", "One-minute load average.",
                                       MetricType::Gauge, load1));
  }
  if (std::optional<int64_t> total = meminfo_bytes("MemTotal")) {
    out.push_back(single_sample_family("kiln_node_memory_total_bytes", "Total memory in bytes.",
                                       MetricType::Gauge, static_cast<double>(*total)));
  }
  if (std::optional<int64_t> available = meminfo_bytes("MemAvailable")) {
    out.push_back(single_sample_family("kiln_node_memory_available_bytes",
                                       "Memory available to new work in bytes (MemAvailable).",
                                       MetricType::Gauge, static_cast<double>(*available)));
  }
  struct statvfs shm {};
  if (statvfs("/dev/shm", &shm) == 0) {
    out.push_back(single_sample_family("kiln_node_shm_free_bytes", "Free bytes in /dev/shm.",
                                       MetricType::Gauge,
                                       static_cast<double>(shm.f_bavail) * shm.f_frsize));
  }
  return out;
}

}  // namespace kiln::preflight
