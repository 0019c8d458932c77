// Health figures against thresholds (kiln/preflight/health.h).
#include <kiln/preflight/health.h>

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
  return out;
}

}  // namespace kiln::preflight
