# kiln_sched proper: state machines, the policy, the coordinator and its API, the node agent.
kiln_library(NAME sched
  SOURCES
    agent/node_agent.cc
    coordinator/api.cc
    coordinator/auth.cc
    coordinator/coordinator.cc
    coordinator/daemons.cc
    coordinator/queue_config.cc
    coordinator/recovery.cc
    coordinator/reports.cc
  PUBLIC_DEPS kiln_sched_policy kiln_sched_state kiln_sched_exec kiln_obs kiln_launch kiln_base
              nlohmann_json::nlohmann_json
  PRIVATE_DEPS fmt::fmt OpenSSL::Crypto)

kiln_tests(NAME sched
  SOURCES
    coordinator/api_test.cc
    coordinator/auth_test.cc
    coordinator/coordinator_test.cc
    coordinator/queue_config_test.cc
    core/states_test.cc
  DEPS kiln_sched)
