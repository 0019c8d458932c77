# kiln_sched_policy: the scheduling policies (pure functions from a snapshot to a plan), fair
# share, and the simulator that replays traces through them (`kiln sched-sim`). No I/O but the
# simulator's file readers, no clock but the one injected: the coordinator, the tests and the
# simulator run the same code.
set(kiln_sched_policy_dir ${CMAKE_CURRENT_LIST_DIR})
kiln_library(NAME sched_policy
  SOURCES
    ${kiln_sched_policy_dir}/policy/baselines.cc
    ${kiln_sched_policy_dir}/policy/cluster.cc
    ${kiln_sched_policy_dir}/policy/fair_share.cc
    ${kiln_sched_policy_dir}/policy/kiln_policy.cc
    ${kiln_sched_policy_dir}/policy/policy.cc
    ${kiln_sched_policy_dir}/policy/quota.cc
    ${kiln_sched_policy_dir}/policy/reservation.cc
    ${kiln_sched_policy_dir}/policy/straggler.cc
    ${kiln_sched_policy_dir}/core/states.cc
    ${kiln_sched_policy_dir}/sim/simulator.cc
    ${kiln_sched_policy_dir}/sim/trace.cc
  PUBLIC_DEPS kiln_base nlohmann_json::nlohmann_json)

kiln_tests(NAME sched_policy
  SOURCES
    ${kiln_sched_policy_dir}/policy/kiln_policy_test.cc
    ${kiln_sched_policy_dir}/policy/baselines_test.cc
    ${kiln_sched_policy_dir}/policy/fair_share_test.cc
    ${kiln_sched_policy_dir}/policy/straggler_test.cc
    ${kiln_sched_policy_dir}/sim/trace_test.cc
    ${kiln_sched_policy_dir}/sim/simulator_test.cc
  DEPS kiln_sched_policy)
