// Assembles the node-facts document. See include/kiln/preflight/facts.h for its shape.
#include <kiln/base/build_info.h>
#include <kiln/base/clock.h>
#include <kiln/base/cpu.h>
#include <kiln/ops/blas.h>
#include <kiln/ops/gemm_library.h>
#include <kiln/preflight/facts.h>

#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "preflight/fact_sections.h"
#include "preflight/proc_files.h"

namespace kiln::preflight {
namespace {

using Json = nlohmann::ordered_json;

template <typename T>
Json or_null(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

Json kiln_facts() {
  const BuildInfo& b = build_info();
  Json k;
  k["version"] = b.version;
  k["git_commit"] = b.git_commit;
  k["git_dirty"] = b.git_dirty;
  k["build_type"] = b.build_type;
  k["compiler"] = b.compiler;
  k["sanitizer"] = b.sanitizer.empty() ? Json(nullptr) : Json(b.sanitizer);
  const std::string id = executable_build_id();
  k["build_id"] = id.empty() ? Json(nullptr) : Json(id);
  return k;
}

Json host_facts() {
  Json h;
  char name[256] = {0};
  h["hostname"] = gethostname(name, sizeof(name) - 1) == 0 ? Json(name) : Json(nullptr);
  h["boot_id"] = or_null(read_trimmed("/proc/sys/kernel/random/boot_id"));
  // "/proc/uptime" is "<seconds up> <seconds idle>".
  std::optional<std::string> uptime = read_trimmed("/proc/uptime");
  double up_s = 0;
  h["uptime_s"] =
      uptime && std::sscanf(uptime->c_str(), "%lf", &up_s) == 1 ? Json(up_s) : Json(nullptr);
  return h;
}

Json os_facts() {
  std::map<std::string, std::string> release = read_key_values("/etc/os-release");
  auto field = [&](const char* key) {
    auto it = release.find(key);
    return it == release.end() ? Json(nullptr) : Json(it->second);
  };
  Json os;
  os["id"] = field("ID");
  os["version_id"] = field("VERSION_ID");
  os["pretty_name"] = field("PRETTY_NAME");
  return os;
}

Json kernel_facts() {
  Json k;
  utsname u{};
  if (uname(&u) == 0) {
    k["release"] = u.release;
    k["version"] = u.version;
    k["machine"] = u.machine;
  } else {
    k["release"] = k["version"] = k["machine"] = nullptr;
  }
  return k;
}

// "model name\t: AMD EPYC 9R14" -> "AMD EPYC 9R14".
std::string value_after_colon(const std::string& line) {
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return "";
  const size_t start = line.find_first_not_of(" \t", colon + 1);
  return start == std::string::npos ? "" : line.substr(start);
}

Json cpu_facts() {
  // /proc/cpuinfo lists one block per logical CPU; physical cores are distinct
  // (physical id, core id) pairs, sockets distinct physical ids. VMs may omit both.
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::optional<std::string> vendor;
  std::optional<std::string> model;
  std::set<std::pair<std::string, std::string>> cores;
  std::set<std::string> sockets;
  std::string physical_id;
  while (std::getline(in, line)) {
    if (line.rfind("vendor_id", 0) == 0 && !vendor) vendor = value_after_colon(line);
    if (line.rfind("model name", 0) == 0 && !model) model = value_after_colon(line);
    if (line.rfind("physical id", 0) == 0) {
      physical_id = value_after_colon(line);
      sockets.insert(physical_id);
    }
    if (line.rfind("core id", 0) == 0) cores.emplace(physical_id, value_after_colon(line));
  }
  const CpuFeatures features = detect_cpu_features();
  Json c;
  c["vendor"] = or_null(vendor);
  c["model"] = or_null(model);
  c["logical_cores"] = sysconf(_SC_NPROCESSORS_ONLN);
  c["physical_cores"] = cores.empty() ? Json(nullptr) : Json(cores.size());
  c["sockets"] = sockets.empty() ? Json(nullptr) : Json(sockets.size());
  c["isa_flags"] = features.flag_names();
  c["best_isa"] = cpu_isa_name(features.best_isa());
  return c;
}

// The BLAS kiln_ops' GEMMs run on and its kernel set (kiln/ops/blas.h): `fallback` true means
// the kernels use less than the CPU has, so sgemm runs well below the machine's speed.
Json blas_facts() {
  const ops::BlasInfo info = ops::blas_info();
  Json b;
  b["library"] = info.library;
  b["config"] = info.config;
  b["core"] = info.core;
  b["core_isa"] = cpu_isa_name(info.core_isa);
  b["cpu_isa"] = cpu_isa_name(info.cpu_isa);
  b["fallback"] = info.fallback();
  b["coretype_env"] = info.coretype_env.empty() ? Json(nullptr) : Json(info.coretype_env);
  // Set by the kiln binary when it forced the core: what OpenBLAS had chosen by itself.
  const char* found = std::getenv("KILN_OPENBLAS_CORE_FOUND");
  b["core_chosen_by_openblas"] = found != nullptr ? Json(found) : Json(info.core);
  return b;
}

// The GEMM library kiln_ops' matmuls call on this machine, and why (kiln/ops/gemm_library.h):
// the race's figures when it was raced, so a node whose choice differs from its peers' shows it.
Json gemm_facts() {
  Json g;
  Result<ops::GemmChoice> choice = ops::process_gemm_choice();
  if (!choice.ok()) {
    g["library"] = nullptr;
    g["why"] = choice.status().to_string();
    return g;
  }
  g["library"] = std::string(ops::gemm_library_name(choice->library));
  g["why"] = choice->why;
  if (choice->race.openblas_gflops > 0) {
    g["race"] = {{"openblas_core", choice->race.openblas_core},
                 {"openblas_gflops", choice->race.openblas_gflops},
                 {"onednn_version", choice->race.onednn_version},
                 {"onednn_gflops", choice->race.onednn_gflops},
                 {"onednn_over_openblas", choice->race.onednn_over_openblas},
                 {"measured_at", choice->race.measured_at}};
  }
  return g;
}

Json memory_facts() {
  Json m;
  m["total_bytes"] = or_null(meminfo_bytes("MemTotal"));
  m["available_bytes"] = or_null(meminfo_bytes("MemAvailable"));
  m["hugepages_total"] = or_null(read_int("/proc/sys/vm/nr_hugepages"));
  return m;
}

// The run queue's 1-minute average against the CPUs: work of other processes on a node that
// should be idle (a leftover rank, a runaway job) shows here.
Json load_facts() {
  Json l;
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  l["cpus_online"] = cpus > 0 ? Json(cpus) : Json(nullptr);
  std::optional<std::string> text = read_trimmed("/proc/loadavg");
  double avg = 0;
  l["loadavg_1m"] =
      text && std::sscanf(text->c_str(), "%lf", &avg) == 1 ? Json(avg) : Json(nullptr);
  return l;
}

Json disk_facts(const std::vector<std::string>& dirs) {
  Json out = Json::array();
  for (const std::string& dir : dirs) {
    Json d;
    d["path"] = dir;
    struct statvfs fs {};
    if (statvfs(dir.c_str(), &fs) == 0) {
      d["free_bytes"] = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
      d["total_bytes"] = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
    } else {
      d["free_bytes"] = d["total_bytes"] = nullptr;
    }
    out.push_back(std::move(d));
  }
  return out;
}

// cgroup v2 alone ("unified"), v1 with or without a v2 mount ("hybrid", "v1"), or null.
Json cgroup_layout() {
  struct statvfs unused {};
  if (statvfs("/sys/fs/cgroup/cgroup.controllers", &unused) == 0) return "v2";
  if (statvfs("/sys/fs/cgroup/unified", &unused) == 0) return "hybrid";
  if (statvfs("/sys/fs/cgroup/memory", &unused) == 0) return "v1";
  return nullptr;
}

Json kernel_param_facts() {
  Json p;
  struct statvfs shm {};
  if (statvfs("/dev/shm", &shm) == 0) {
    p["shm_total_bytes"] = static_cast<uint64_t>(shm.f_blocks) * shm.f_frsize;
    p["shm_free_bytes"] = static_cast<uint64_t>(shm.f_bavail) * shm.f_frsize;
  } else {
    p["shm_total_bytes"] = p["shm_free_bytes"] = nullptr;
  }
  // shmmax may exceed INT64_MAX ("unlimited" is 2^64 - 2^24 - 1); keep it as text then.
  std::optional<std::string> shmmax = read_trimmed("/proc/sys/kernel/shmmax");
  p["shmmax_bytes"] = or_null(shmmax);
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    p["open_files_soft"] = static_cast<uint64_t>(nofile.rlim_cur);
    p["open_files_hard"] = static_cast<uint64_t>(nofile.rlim_max);
  } else {
    p["open_files_soft"] = p["open_files_hard"] = nullptr;
  }
  p["somaxconn"] = or_null(read_int("/proc/sys/net/core/somaxconn"));
  p["rmem_max_bytes"] = or_null(read_int("/proc/sys/net/core/rmem_max"));
  p["wmem_max_bytes"] = or_null(read_int("/proc/sys/net/core/wmem_max"));
  p["overcommit_memory"] = or_null(read_int("/proc/sys/vm/overcommit_memory"));
  p["transparent_hugepage"] =
      or_null(selected_choice("/sys/kernel/mm/transparent_hugepage/enabled"));
  int numa_nodes = 0;
  while (read_trimmed("/sys/devices/system/node/node" + std::to_string(numa_nodes) + "/cpulist")) {
    ++numa_nodes;
  }
  p["numa_nodes"] = numa_nodes > 0 ? Json(numa_nodes) : Json(nullptr);
  p["cgroup_layout"] = cgroup_layout();
  return p;
}

}  // namespace

nlohmann::ordered_json environment_facts(char** env) {
  // Prefixes of the variables that change what Kiln or the libraries under it do.
  static constexpr const char* kPrefixes[] = {"KILN_",     "OMP_",  "GOMP_",   "KMP_",
                                              "OPENBLAS_", "GOTO_", "MKL_",    "DNNL_",
                                              "ONEDNN_",   "CUDA_", "MALLOC_", "GLIBC_TUNABLES"};
  // A value that may be a credential never leaves the node.
  static constexpr const char* kSecretParts[] = {"TOKEN", "SECRET", "PASSWORD", "KEY"};
  std::map<std::string, std::string> found;  // sorted: the document does not depend on env order
  for (char** e = env; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    const std::string name = entry.substr(0, eq);
    bool wanted = false;
    for (const char* p : kPrefixes)
      wanted = wanted || name.rfind(p, 0) == 0;
    if (!wanted) continue;
    bool secret = false;
    for (const char* part : kSecretParts)
      secret = secret || name.find(part) != std::string::npos;
    // Bounded: a value is recorded up to 4 KiB (a variable's value is not a place for data).
    found[name] = secret ? "(redacted)" : entry.substr(eq + 1, 4096);
  }
  Json out = Json::object();
  for (auto& [name, value] : found)
    out[name] = std::move(value);
  return out;
}

nlohmann::ordered_json collect_node_facts(const std::vector<std::string>& dirs) {
  Json facts;
  facts["schema"] = "kiln.facts/1";
  facts["collected_at"] = format_wall_time_utc(wall_now_ns());
  facts["kiln"] = kiln_facts();
  facts["host"] = host_facts();
  facts["os"] = os_facts();
  facts["kernel"] = kernel_facts();
  facts["cpu"] = cpu_facts();
  facts["blas"] = blas_facts();
  facts["gemm"] = gemm_facts();
  facts["memory"] = memory_facts();
  facts["load"] = load_facts();
  facts["disks"] = disk_facts(dirs);
  facts["kernel_params"] = kernel_param_facts();
  // The GPU probe first: it dlopens the CUDA libraries (which stay loaded), and the loaded
  // shared objects read after it are then the same on a process's first collection as on its
  // hundredth (an agent's first facts must equal a long-running agent's on the same node).
  Json gpu = gpu_facts();
  Json shared_objects = shared_object_facts();
  facts["libraries"] = library_facts(shared_objects);
  facts["shared_objects"] = std::move(shared_objects);
  facts["gpu"] = std::move(gpu);
  facts["environment"] = environment_facts(environ);
  return facts;
}

}  // namespace kiln::preflight
