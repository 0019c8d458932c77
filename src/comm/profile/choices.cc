// tuning_choices(): the rules of tuning.h and transport/wait_policy.h applied to one machine's
// profile, for people (kiln comm-tune) rather than for a communicator.
#include <kiln/comm/machine_profile.h>

#include "comm/transport/wait_policy.h"
#include "comm/tuning.h"

namespace kiln::comm {

TuningChoices tuning_choices(const MachineProfile* profile) {
  TuningChoices out;
  const WaitPolicy wait = choose_wait_policy(1, "", profile, std::nullopt, std::nullopt);
  out.spin_us_alone = static_cast<double>(wait.spin_ns) / 1000.0;
  out.spin_why = wait.why;
  const LinkCost cost =
      profile == nullptr
          ? shm_link_cost()
          : shm_link_cost_from(profile->cross_core ? profile->handoff_ns.p50 / 1000.0 : 0,
                               profile->copy_gbps, profile->reduce_gbps);
  out.shm_alpha_us = cost.alpha_us;
  out.shm_copy_gbps = 1.0 / (cost.beta_us_per_byte * 1000.0);
  out.shm_reduce_gbps = 3.0 / (cost.gamma_us_per_byte * 1000.0);
  if (profile != nullptr) {
    out.stream_out_bytes_min = stream_output_bytes_min(
        profile->reduce_gbps, profile->reduce_stream_gbps, profile->l2_bytes);
  }
  for (int n : {2, 4, 8, 16})
    out.ring_from_bytes.emplace_back(n, ring_crossover_bytes(n, cost));
  return out;
}

}  // namespace kiln::comm
