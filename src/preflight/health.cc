// Health figures against thresholds (kiln/preflight/health.h).
#include <kiln/preflight/health.h>

#include <cstdio>
#include <cstdlib>

namespace kiln::preflight {
namespace {

// facts[section][field] as an integer; nullopt when absent, null or not a number (shmmax is a
// string: too large for JSON's safe integers).
std::optional<int64_t> figure(const nlohmann::json& facts, const char* section, const char* field) {
  if (!facts.is_object()) return std::nullopt;
  auto s = facts.find(section);
  if (s == facts.end() || !s->is_object()) return std::nullopt;
  auto f = s->find(field);
  if (f == s->end() || !f->is_number_integer()) return std::nullopt;
  return f->get<int64_t>();
}

}  // namespace

std::vector<Finding> check_health(const std::string& node, const nlohmann::json& facts,
                                  const HealthThresholds& t,
                                  std::optional<int64_t> clock_offset_ms) {
  std::vector<Finding> out;
  auto at_least = [&](const char* section, const char* field, int64_t min) {
    const std::string path = std::string(section) + "." + field;
    const std::optional<int64_t> v = figure(facts, section, field);
    if (v && *v >= min) return;
    Finding f;
    f.node = node;
    f.path = path;
    f.expected = ">= " + std::to_string(min);
    f.found = v ? std::to_string(*v) : "unknown";
    f.against = "threshold";
    f.check = "health";
    out.push_back(std::move(f));
  };
  at_least("kernel_params", "shm_free_bytes", t.shm_free_bytes_min);
  at_least("memory", "available_bytes", t.memory_available_bytes_min);
  at_least("kernel_params", "open_files_soft", t.open_files_min);
  if (clock_offset_ms && std::llabs(*clock_offset_ms) > t.clock_offset_ms_max) {
    Finding f;
    f.node = node;
    f.path = "clock_offset_ms";
    f.expected = "|offset| <= " + std::to_string(t.clock_offset_ms_max);
    f.found = std::to_string(*clock_offset_ms);
    f.against = "threshold";
    f.check = "health";
    out.push_back(std::move(f));
  }
  auto finding = [&](std::string path, std::string expected, std::string found) {
    out.push_back(Finding{node, std::move(path), std::move(expected), std::move(found), "threshold",
                          "health"});
  };
  if (t.load_per_cpu_max > 0) {
    const nlohmann::json load = facts.is_object() ? facts.value("load", nlohmann::json()) : nullptr;
    const nlohmann::json avg =
        load.is_object() ? load.value("loadavg_1m", nlohmann::json()) : nullptr;
    const nlohmann::json cpus =
        load.is_object() ? load.value("cpus_online", nlohmann::json()) : nullptr;
    char expected[64], found[96];
    std::snprintf(expected, sizeof expected, "<= %g per CPU", t.load_per_cpu_max);
    if (!load.is_object()) {
      // Facts of an older agent have no load section: nothing to check, not "unknown".
    } else if (!avg.is_number() || !cpus.is_number_integer() || cpus.get<int64_t>() < 1) {
      finding("load.loadavg_1m", expected, "unknown");
    } else if (avg.get<double>() / static_cast<double>(cpus.get<int64_t>()) > t.load_per_cpu_max) {
      std::snprintf(found, sizeof found, "%.2f on %lld CPUs", avg.get<double>(),
                    static_cast<long long>(cpus.get<int64_t>()));
      finding("load.loadavg_1m", expected, found);
    }
  }
  const nlohmann::json disks = facts.is_object() ? facts.value("disks", nlohmann::json()) : nullptr;
  if (disks.is_array()) {
    for (const nlohmann::json& d : disks) {
      const std::string path = d.is_object() ? d.value("path", std::string("?")) : "?";
      const nlohmann::json free = d.is_object() ? d.value("free_bytes", nlohmann::json()) : nullptr;
      if (free.is_number_integer() && free.get<int64_t>() >= t.disk_free_bytes_min) continue;
      finding("disks." + path + ".free_bytes", ">= " + std::to_string(t.disk_free_bytes_min),
              free.is_number_integer() ? std::to_string(free.get<int64_t>())
                                       : "unknown (not a readable directory)");
    }
  }
  // A device whose memory size the driver cannot tell is not a device a rank can use.
  const nlohmann::json gpu = facts.is_object() ? facts.value("gpu", nlohmann::json()) : nullptr;
  const nlohmann::json devices = gpu.is_object() ? gpu.value("devices", nlohmann::json()) : nullptr;
  const nlohmann::json driver =
      gpu.is_object() ? gpu.value("driver_version", nlohmann::json()) : nullptr;
  if (driver.is_string() && (!devices.is_array() || devices.empty())) {
    finding("gpu.devices",
            "devices where the NVIDIA driver " + driver.get<std::string>() + " is loaded",
            devices.is_array() ? "none" : "unknown (CUDA did not initialize)");
  }
  if (devices.is_array()) {
    for (size_t i = 0; i < devices.size(); ++i) {
      const nlohmann::json& d = devices[i];
      if (d.is_object() && d.value("memory_bytes", nlohmann::json()).is_number_integer()) continue;
      finding("gpu.devices." + std::to_string(i), "a device that answers",
              "no memory size from the driver");
    }
  }
  return out;
}

std::vector<Finding> check_gpu_counts(const std::map<std::string, GpuCount>& devices) {
  // Per model: the count most of its nodes have (the larger on a tie).
  std::map<std::string, std::map<int64_t, size_t>> votes;
  for (const auto& [node, c] : devices)
    if (c.devices > 0) ++votes[c.model][c.devices];
  std::map<std::string, int64_t> common;
  for (const auto& [model, counts] : votes) {
    size_t most = 0;
    for (const auto& [n, v] : counts) {
      if (v >= most) common[model] = n, most = v;
    }
  }
  std::vector<Finding> out;
  for (const auto& [node, c] : devices) {
    auto it = common.find(c.model);
    if (it != common.end() && c.devices < it->second) {
      out.push_back(Finding{node, "gpu.count", ">= " + std::to_string(it->second) + " " + c.model,
                            std::to_string(c.devices), "majority", "health"});
    }
  }
  return out;
}

}  // namespace kiln::preflight
