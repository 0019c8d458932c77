// Builders for policy tests: small clusters and jobs with readable defaults.
#ifndef KILN_SCHED_POLICY_TEST_UTIL_H_
#define KILN_SCHED_POLICY_TEST_UTIL_H_

#include <string>
#include <vector>

#include <kiln/sched/policy.h>

namespace kiln::sched::testing {

// A node with `gpus` GPUs of `model` and 8 CPUs per GPU (or 32 CPUs without GPUs), in
// rack/switch.
inline NodeView gpu_node(const std::string& name, const std::string& rack, const std::string& sw,
                         int64_t gpus = 8, const std::string& model = "A100") {
  NodeView n;
  n.name = name;
  n.domain = {rack, sw};
  n.capacity.cpus = gpus > 0 ? 8 * gpus : 32;
  n.capacity.memory_bytes = int64_t{512} << 30;
  n.capacity.gpus = gpus;
  n.gpu_model = gpus > 0 ? model : "";
  return n;
}

// `racks` x `switches` x `per_switch` nodes named n<rack><switch><k>.
inline std::vector<NodeView> grid(int racks, int switches, int per_switch, int64_t gpus = 8) {
  std::vector<NodeView> out;
  for (int r = 0; r < racks; ++r)
    for (int s = 0; s < switches; ++s)
      for (int k = 0; k < per_switch; ++k)
        out.push_back(gpu_node("n" + std::to_string(r) + std::to_string(s) + std::to_string(k),
                               "r" + std::to_string(r), "s" + std::to_string(s), gpus));
  return out;
}

inline JobView gpu_job(const std::string& id, int64_t seq, int nodes, int64_t gpus_per_node = 8,
                       double limit_s = 3600) {
  JobView j;
  j.id = id;
  j.seq = seq;
  j.submit_s = static_cast<double>(seq);
  j.nodes = j.min_nodes = nodes;
  j.per_node.gpus = gpus_per_node;
  j.per_node.cpus = gpus_per_node > 0 ? gpus_per_node * 8 : 1;
  j.time_limit_s = limit_s;
  return j;
}

// An allocation of `job` on the named nodes of `s`, started at start_s; marks the nodes used.
inline void run_on(Snapshot* s, const JobView& job, const std::vector<std::string>& names,
                   double start_s = 0) {
  Allocation a;
  a.job_id = job.id;
  a.queue = job.queue;
  a.priority = job.priority;
  a.per_node = job.per_node;
  a.start_s = start_s;
  a.end_s = job.time_limit_s > 0 ? start_s + job.time_limit_s : kNever;
  a.last_checkpoint_s = start_s;
  for (const std::string& name : names) {
    for (size_t i = 0; i < s->nodes.size(); ++i) {
      if (s->nodes[i].name != name) continue;
      a.nodes.push_back(static_cast<int32_t>(i));
      NodeResources& u = s->nodes[i].used;
      u.slots += job.per_node.slots;
      u.cpus += job.per_node.cpus;
      u.memory_bytes += job.per_node.memory_bytes;
      u.gpus += job.per_node.gpus;
    }
  }
  s->running.push_back(std::move(a));
}

// Four nodes in one switch: r1 (limit 1000) on two, r2 (limit 5000) on one, n003 free; waiting:
// a 3-node head (it can start at t=1000), then a 1-node job too long for the hole and a short one
// that ends before the head's start.
inline Snapshot blocked_head() {
  Snapshot s;
  s.nodes = grid(1, 1, 4);
  run_on(&s, gpu_job("r1", 0, 2, 8, 1000), {"n000", "n001"});
  run_on(&s, gpu_job("r2", 0, 1, 8, 5000), {"n002"});
  s.waiting = {gpu_job("head", 1, 3, 8, 1000), gpu_job("long", 2, 1, 8, 2000),
               gpu_job("short", 3, 1, 8, 500)};
  return s;
}

inline const Placement* placement_of(const Plan& plan, const std::string& id) {
  for (const Placement& p : plan.placements)
    if (p.job_id == id) return &p;
  return nullptr;
}

}  // namespace kiln::sched::testing

#endif  // KILN_SCHED_POLICY_TEST_UTIL_H_
