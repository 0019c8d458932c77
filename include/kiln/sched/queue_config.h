// The coordinator's queues (`kiln serve --queues FILE.yaml`): who may submit where, each queue's
// quota per pool, what it may borrow from its cohort, and its team's fair-share weight.
//
//   queues:
//     research:                  # the queue's name (a job's `queue:`)
//       team: research           # only this team (and admins) may submit to it; default: name
//       cohort: main             # queues of one cohort lend each other idle quota
//       weight: 3                # the team's fair share relative to others (default 1)
//       quota:                   # per pool (a node's `pool` label, default "default")
//         default: {nodes: 2, cpus: 8, gpus: 0}    # a resource not named is unlimited
//       borrow:                  # beyond quota, from the cohort's idle quota; not named: 0
//         default: {nodes: 2}
//
// Without the file every queue name is accepted, unlimited, and its own team with weight 1.
// Errors name file:line:key (ConfigDocument).
#ifndef KILN_SCHED_QUEUE_CONFIG_H_
#define KILN_SCHED_QUEUE_CONFIG_H_

#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/sched/policy.h>

namespace kiln::sched {

inline constexpr size_t kQueuesMax = 1000;

Result<std::vector<QueueSpec>> parse_queue_config(std::string_view yaml,
                                                  const std::string& source_name);
Result<std::vector<QueueSpec>> load_queue_config(const std::string& path);

}  // namespace kiln::sched

#endif  // KILN_SCHED_QUEUE_CONFIG_H_
