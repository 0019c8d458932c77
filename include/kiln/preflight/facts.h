// Node facts: what this machine is and what software stack it runs, as one JSON document.
//
// The facts feed the stack-consistency check (every node of a job must run the same stack) and
// `kiln facts --json`. The document's shape is fixed: every field below is always present, with
// null where this machine cannot say (no GPU, no NUMA information, ...). Fields are added, never
// renamed or removed; "schema" changes its number when a field's meaning changes.
//
//   schema          "kiln.facts/1"
//   collected_at    RFC 3339 UTC time of collection
//   kiln            version, git_commit, git_dirty, build_type, compiler, sanitizer, build_id
//   host            hostname, boot_id, uptime_s
//   os              id, version_id, pretty_name                    (/etc/os-release)
//   kernel          release, version, machine                      (uname)
//   cpu             vendor, model, logical_cores, physical_cores, sockets, isa_flags, best_isa
//   memory          total_bytes, available_bytes, hugepages_total
//   load            cpus_online, loadavg_1m                        (/proc/loadavg: the others'
//                                                                   work on a node that idles)
//   disks           [{path, free_bytes, total_bytes}] of the directories asked for (an agent's
//                   work directory and its --check-dir ones: checkpoints, data)
//   kernel_params   shm_total_bytes, shm_free_bytes, shmmax_bytes, open_files_soft,
//                   open_files_hard, somaxconn, rmem_max_bytes, wmem_max_bytes,
//                   overcommit_memory, transparent_hugepage, numa_nodes, cgroup_layout
//   libraries       glibc, libstdcxx, fmt, spdlog, nlohmann_json, yaml_cpp, cli11, cpp_httplib,
//                   prometheus_cpp, xxhash, openssl
//   shared_objects  {soname-as-loaded: resolved path} for every shared library in the process
//   gpu             driver_version, cuda_driver_version, cuda_runtime_version, devices
//   environment     {NAME: value} of the variables that change behaviour (KILN_*, OMP_*,
//                   OPENBLAS_*, ...; fact_sections.h lists them); credentials "(redacted)"
#ifndef KILN_PREFLIGHT_FACTS_H_
#define KILN_PREFLIGHT_FACTS_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::preflight {

// Collects this node's facts, `disks` for each of `dirs`. Never fails: what cannot be read is
// null. Takes a few milliseconds (it reads /proc and /sys, and probes for the CUDA libraries with
// dlopen).
nlohmann::ordered_json collect_node_facts(const std::vector<std::string>& dirs = {});

}  // namespace kiln::preflight

#endif  // KILN_PREFLIGHT_FACTS_H_
