// See include/kiln/base/cpu_topology.h.
#include <kiln/base/check.h>
#include <kiln/base/cpu_topology.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace kiln {
namespace {

// sysfs files here hold one short line; anything longer is not what we look for.
constexpr size_t kLineCharsMax = 64 << 10;

std::optional<std::string> read_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  line.reserve(256);
  char c;
  while (line.size() < kLineCharsMax && in.get(c) && c != '\n')
    line += c;
  return line;
}

std::optional<int> read_int(const std::filesystem::path& path) {
  std::optional<std::string> line = read_line(path);
  if (!line) return std::nullopt;
  int value = 0;
  auto [ptr, ec] = std::from_chars(line->data(), line->data() + line->size(), value);
  if (ec != std::errc() || ptr != line->data() + line->size()) return std::nullopt;
  return value;
}

// CPU -> NUMA node, from node/nodeN/cpulist; CPUs no node lists are missing.
std::map<int, int> read_nodes(const std::filesystem::path& node_dir) {
  std::map<int, int> node_of;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(node_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("node", 0) != 0) continue;
    int node = 0;
    auto [ptr, err] = std::from_chars(name.data() + 4, name.data() + name.size(), node);
    if (err != std::errc() || ptr != name.data() + name.size()) continue;
    std::optional<std::string> list = read_line(entry.path() / "cpulist");
    if (!list) continue;
    Result<CpuSet> cpus = CpuSet::parse(*list);
    if (!cpus.ok()) continue;
    for (int cpu : cpus->cpus())
      node_of.emplace(cpu, node);
  }
  return node_of;
}

}  // namespace

int CpuTopology::cpu_count() const {
  int n = 0;
  for (const CpuCore& core : cores)
    n += core.cpus.size();
  return n;
}

int CpuTopology::node_count() const {
  std::set<int> nodes;
  for (const CpuCore& core : cores)
    nodes.insert(core.node);
  return static_cast<int>(nodes.size());
}

CpuSet CpuTopology::all_cpus() const {
  std::vector<int> cpus;
  for (const CpuCore& core : cores) {
    cpus.insert(cpus.end(), core.cpus.cpus().begin(), core.cpus.cpus().end());
  }
  return CpuSet(std::move(cpus));
}

std::string CpuTopology::describe() const {
  const int nodes = node_count();
  std::string s = std::to_string(cores.size()) + (cores.size() == 1 ? " core (" : " cores (") +
                  std::to_string(cpu_count()) + " CPUs " + all_cpus().to_string() + ") on " +
                  std::to_string(nodes) + (nodes == 1 ? " NUMA node" : " NUMA nodes");
  if (guessed) s += " (topology guessed: sysfs has none for some CPUs)";
  return s;
}

CpuTopology read_cpu_topology(const std::string& sysfs_system, const CpuSet& allowed) {
  KILN_CHECK(!allowed.empty());
  const std::filesystem::path root(sysfs_system);
  const std::map<int, int> node_of = read_nodes(root / "node");
  // (node, package, core id) -> the core; a CPU without topology files gets a key of its own.
  std::map<std::tuple<int, int, int>, std::vector<int>> by_core;
  CpuTopology topology;
  for (int cpu : allowed.cpus()) {
    const std::filesystem::path dir = root / "cpu" / ("cpu" + std::to_string(cpu)) / "topology";
    const std::optional<int> core_id = read_int(dir / "core_id");
    const std::optional<int> package = read_int(dir / "physical_package_id");
    const auto node = node_of.find(cpu);
    if (!core_id || !package || node == node_of.end()) {
      topology.guessed = true;
      // Negative core ids cannot collide with the kernel's, which are >= 0.
      by_core[{node == node_of.end() ? 0 : node->second, 0, -1 - cpu}].push_back(cpu);
      continue;
    }
    by_core[{node->second, *package, *core_id}].push_back(cpu);
  }
  for (auto& [key, cpus] : by_core) {
    CpuCore core;
    core.node = std::get<0>(key);
    core.package = std::get<1>(key);
    core.core_id = std::get<2>(key);
    core.cpus = CpuSet(std::move(cpus));
    topology.cores.push_back(std::move(core));
  }
  // Within a socket, by the lowest CPU number (the kernel's core ids need not be dense or
  // ordered, and guessed cores have none).
  std::sort(topology.cores.begin(), topology.cores.end(), [](const CpuCore& a, const CpuCore& b) {
    return std::make_tuple(a.node, a.package, a.cpus.cpus().front()) <
           std::make_tuple(b.node, b.package, b.cpus.cpus().front());
  });
  return topology;
}

Result<CpuTopology> this_machine_topology() {
  KILN_ASSIGN_OR_RETURN(CpuSet allowed, CpuSet::of_this_thread());
  if (allowed.empty()) return Status::io_error("sched_getaffinity returned no CPU");
  return read_cpu_topology("/sys/devices/system", allowed);
}

}  // namespace kiln
