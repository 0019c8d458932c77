// MachineProfile's JSON form and its cache file (machine_profile.h). The measurements are in
// measure.cc.
#include <kiln/comm/machine_profile.h>

#include <kiln/base/json.h>
#include <kiln/base/machine_cache.h>

#include <nlohmann/json.hpp>

namespace kiln::comm {
namespace {

// A profile is a few hundred bytes; anything much larger is not one.
constexpr size_t kProfileBytesMax = 64 << 10;
// Figures outside these are not measurements of a working machine (a broken file, or a unit
// slip): hand-offs and wake-ups of more than a second, bandwidths above 10 TB/s.
constexpr double kLatencyNsMax = 1e9;
constexpr double kGbpsMax = 1e4;

nlohmann::ordered_json latency_json(const LatencyNs& l) {
  return {{"p50", l.p50}, {"p90", l.p90}, {"p99", l.p99}};
}

}  // namespace

std::string machine_profile_to_json(const MachineProfile& p) {
  nlohmann::ordered_json j;
  j["version"] = p.version;
  j["machine"] = p.machine;
  j["cpu_model"] = p.cpu_model;
  j["l2_bytes"] = p.l2_bytes;
  j["llc_bytes"] = p.llc_bytes;
  j["cpus"] = p.cpus;
  j["cross_core"] = p.cross_core;
  j["handoff_ns"] = latency_json(p.handoff_ns);
  j["wakeup_ns"] = latency_json(p.wakeup_ns);
  j["copy_gbps"] = p.copy_gbps;
  j["reduce_gbps"] = p.reduce_gbps;
  j["reduce_stream_gbps"] = p.reduce_stream_gbps;
  j["measure_ms"] = p.measure_ms;
  j["measured_at"] = p.measured_at;
  return j.dump();
}

Result<MachineProfile> machine_profile_from_json(std::string_view json, std::string_view what) {
  const std::string where(what);
  KILN_ASSIGN_OR_RETURN(nlohmann::json j,
                        parse_json_bounded(json, {kProfileBytesMax, kJsonDepthMaxDefault}, where));
  if (!j.is_object()) return Status::invalid_argument(where + ": not a JSON object");
  MachineProfile p;
  const char* field = "version";
  const auto latency = [&](const char* name, LatencyNs* out) {
    field = name;
    const nlohmann::json& l = j.at(name);
    out->p50 = l.at("p50").get<double>();
    out->p90 = l.at("p90").get<double>();
    out->p99 = l.at("p99").get<double>();
    return out->p50 >= 0 && out->p50 <= out->p90 && out->p90 <= out->p99 &&
           out->p99 <= kLatencyNsMax;
  };
  try {
    p.version = j.at(field).get<int>();
    if (p.version != kMachineProfileVersion) {
      return Status::invalid_argument(where + ": field version: " + std::to_string(p.version) +
                                      ", this kiln reads " +
                                      std::to_string(kMachineProfileVersion));
    }
    field = "machine";
    p.machine = j.at(field).get<std::string>();
    field = "cpu_model";
    p.cpu_model = j.at(field).get<std::string>();
    field = "l2_bytes";
    p.l2_bytes = j.at(field).get<uint64_t>();
    field = "llc_bytes";
    p.llc_bytes = j.at(field).get<uint64_t>();
    field = "cpus";
    p.cpus = j.at(field).get<std::vector<int>>();
    if (p.cpus.size() > 2) throw nlohmann::json::other_error::create(501, "more than 2", nullptr);
    field = "cross_core";
    p.cross_core = j.at(field).get<bool>();
    if (!latency("handoff_ns", &p.handoff_ns) || !latency("wakeup_ns", &p.wakeup_ns)) {
      return Status::invalid_argument(where + ": field " + field +
                                      ": percentiles must rise and stay in [0, 1e9] ns");
    }
    field = "copy_gbps";
    p.copy_gbps = j.at(field).get<double>();
    field = "reduce_gbps";
    p.reduce_gbps = j.at(field).get<double>();
    if (!(p.copy_gbps > 0 && p.copy_gbps < kGbpsMax && p.reduce_gbps > 0 &&
          p.reduce_gbps < kGbpsMax)) {
      return Status::invalid_argument(where + ": field " + field +
                                      ": bandwidths must be in (0, 1e4) GB/s");
    }
    field = "reduce_stream_gbps";
    p.reduce_stream_gbps = j.at(field).get<double>();
    if (!(p.reduce_stream_gbps > 0 && p.reduce_stream_gbps < kGbpsMax)) {
      return Status::invalid_argument(where + ": field " + field +
                                      ": bandwidths must be in (0, 1e4) GB/s");
    }
    field = "measure_ms";
    p.measure_ms = j.at(field).get<int64_t>();
    field = "measured_at";
    p.measured_at = j.at(field).get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(where + ": field " + field + ": " + e.what());
  }
  return p;
}

std::string default_machine_profile_path(const EnvLookup& env) {
  const auto value = [&](const char* name) { return env(name).value_or(std::string()); };
  return kiln_cache_dir(value("XDG_CACHE_HOME"), value("HOME")) + "/machine-profile.json";
}

Result<CachedProfile> load_or_measure_machine_profile(const ProfileCacheOptions& options) {
  MachineCacheOptions cache;
  cache.path = options.path;
  cache.remeasure = options.remeasure;
  cache.lock_timeout_ms = options.lock_timeout_ms;
  cache.bytes_max = kProfileBytesMax;
  // Valid: parses, and was taken on this boot of this CPU (a profile is of one boot).
  const auto valid = [&](const std::string& text) -> Status {
    KILN_ASSIGN_OR_RETURN(const MachineProfile p, machine_profile_from_json(text, options.path));
    if (p.machine != this_boot_id() || p.cpu_model != this_cpu_model()) {
      return Status::not_found(options.path + ": measured on another boot or CPU");
    }
    return Status();
  };
  const auto measure = [&]() -> Result<std::string> {
    KILN_ASSIGN_OR_RETURN(const MachineProfile p, measure_machine_profile(options.measure));
    return machine_profile_to_json(p) + "\n";
  };
  KILN_ASSIGN_OR_RETURN(const CachedText cached, load_or_measure_cached(cache, valid, measure));
  CachedProfile out;
  out.path = options.path;
  out.measured = cached.measured;
  KILN_ASSIGN_OR_RETURN(out.profile, machine_profile_from_json(cached.text, options.path));
  return out;
}

}  // namespace kiln::comm
