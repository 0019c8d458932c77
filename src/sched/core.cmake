# kiln_sched proper: state machines, the policy, the coordinator and the node agent.
kiln_library(NAME sched
  SOURCES
    core/states.cc
    policy/fifo_gang.cc
    policy/units.cc
  PUBLIC_DEPS kiln_base nlohmann_json::nlohmann_json
  PRIVATE_DEPS fmt::fmt)

kiln_tests(NAME sched
  SOURCES
    core/states_test.cc
    policy/fifo_gang_test.cc
  DEPS kiln_sched)
