// MachineProfile's JSON form and its cache file (machine_profile.h). The measurements are in
// measure.cc.
#include <kiln/comm/machine_profile.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include <kiln/base/clock.h>
#include <kiln/base/file_system.h>
#include <kiln/base/json.h>

#include <nlohmann/json.hpp>

namespace kiln::comm {
namespace {

// A profile is a few hundred bytes; anything much larger is not one.
constexpr size_t kProfileBytesMax = 64 << 10;
constexpr int64_t kLockPollNs = 5'000'000;
// Figures outside these are not measurements of a working machine (a broken file, or a unit
// slip): hand-offs and wake-ups of more than a second, bandwidths above 10 TB/s.
constexpr double kLatencyNsMax = 1e9;
constexpr double kGbpsMax = 1e4;

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string cpuinfo_field(const std::string& text, const std::string& key) {
  size_t at = 0;
  while ((at = text.find(key, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      const size_t colon = text.find(':', at);
      const size_t end = text.find('\n', at);
      if (colon != std::string::npos && colon < end) {
        std::string v = text.substr(colon + 1, end - colon - 1);
        const size_t b = v.find_first_not_of(" \t");
        return b == std::string::npos ? std::string() : v.substr(b);
      }
    }
    at += key.size();
  }
  return {};
}

nlohmann::ordered_json latency_json(const LatencyNs& l) {
  return {{"p50", l.p50}, {"p90", l.p90}, {"p99", l.p99}};
}

// Reads PATH whole if it is a regular file of at most kProfileBytesMax; nullopt-like empty
// Result kNotFound when absent.
Result<std::string> read_small_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return Status::not_found(path + ": no such file");
    return Status::io_error(path + ": open: " + std::strerror(errno));
  }
  std::string text;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<size_t>(st.st_size) > kProfileBytesMax) {
    ::close(fd);
    return Status::invalid_argument(path + ": not a regular file of at most " +
                                    std::to_string(kProfileBytesMax) + " bytes");
  }
  text.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  return text;
}

// The cached profile at `path` if it exists, parses and is of this boot, CPU and version.
Result<MachineProfile> read_valid(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(const std::string text, read_small_file(path));
  KILN_ASSIGN_OR_RETURN(MachineProfile p, machine_profile_from_json(text, path));
  if (p.machine != this_machine_id() || p.cpu_model != this_cpu_model()) {
    return Status::not_found(path + ": measured on another boot or CPU");
  }
  return p;
}

// An exclusive flock on PATH.lock, released when the object goes.
class ProfileLock {
 public:
  static Result<ProfileLock> acquire(const std::string& path, int64_t timeout_ms) {
    const std::string lock_path = path + ".lock";
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Status::io_error(lock_path + ": open: " + std::strerror(errno));
    const Deadline deadline = Deadline::after_ms(timeout_ms);
    while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        const int e = errno;
        ::close(fd);
        return Status::io_error(lock_path + ": flock: " + std::strerror(e));
      }
      if (deadline.expired()) {
        ::close(fd);
        return Status::timeout(lock_path + ": another process held the lock for more than " +
                               std::to_string(timeout_ms) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::nanoseconds(kLockPollNs));
    }
    return ProfileLock(fd);
  }
  ProfileLock(ProfileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ProfileLock& operator=(ProfileLock&&) = delete;
  ~ProfileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing drops the flock
  }

 private:
  explicit ProfileLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace

std::string this_machine_id() {
  const std::string id = first_line("/proc/sys/kernel/random/boot_id");
  return id.size() <= 64 ? id : std::string();
}

std::string this_cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string text;
  std::string line;
  // The first CPU's block is enough (and bounded): it ends at the first empty line.
  while (std::getline(in, line) && !line.empty() && text.size() < kProfileBytesMax)
    text += line + "\n";
  return cpuinfo_field(text, "vendor_id") + " family " + cpuinfo_field(text, "cpu family") +
         " model " + cpuinfo_field(text, "model") + ": " + cpuinfo_field(text, "model name");
}

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
  const auto nonempty = [&](const char* name) -> std::string {
    std::optional<std::string> v = env(name);
    return v ? *v : std::string();
  };
  std::string dir = nonempty("XDG_CACHE_HOME");
  if (!dir.empty()) return dir + "/kiln/machine-profile.json";
  dir = nonempty("HOME");
  if (!dir.empty()) return dir + "/.cache/kiln/machine-profile.json";
  return "/tmp/kiln-" + std::to_string(::getuid()) + "/machine-profile.json";
}

Result<CachedProfile> load_or_measure_machine_profile(const ProfileCacheOptions& options) {
  CachedProfile out;
  out.path = options.path;
  if (!options.remeasure) {
    // The common case, without the lock: the file is replaced by rename, so a reader sees a
    // whole old one or a whole new one.
    if (Result<MachineProfile> cached = read_valid(options.path); cached.ok()) {
      out.profile = std::move(*cached);
      return out;
    }
  }
  KILN_RETURN_IF_ERROR(make_dirs_durably(posix_file_system(), parent_dir(options.path)));
  KILN_ASSIGN_OR_RETURN(ProfileLock lock,
                        ProfileLock::acquire(options.path, options.lock_timeout_ms));
  if (!options.remeasure) {
    if (Result<MachineProfile> cached = read_valid(options.path); cached.ok()) {
      out.profile = std::move(*cached);
      return out;  // another process measured while this one waited
    }
  }
  KILN_ASSIGN_OR_RETURN(out.profile, measure_machine_profile(options.measure));
  out.measured = true;
  const std::string text = machine_profile_to_json(out.profile) + "\n";
  const ByteSpan span{text.data(), text.size()};
  Result<DurableWriteResult> written =
      write_file_durably(posix_file_system(), options.path, std::span<const ByteSpan>(&span, 1));
  if (!written.ok()) return written.status().with_context("caching the machine profile");
  return out;
}

}  // namespace kiln::comm
