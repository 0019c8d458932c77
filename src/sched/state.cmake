# kiln_sched_state: the coordinator's durable state and its inputs: job specs (YAML and JSON),
# durations, the secret box (AES-256-GCM, OpenSSL) and the SQLite state store. Sources are named
# from this file's directory so the file can be included from anywhere.
set(kiln_sched_state_dir ${CMAKE_CURRENT_LIST_DIR})
kiln_library(NAME sched_state
  SOURCES
    ${kiln_sched_state_dir}/duration.cc
    ${kiln_sched_state_dir}/job_spec.cc
    ${kiln_sched_state_dir}/secret_box.cc
    ${kiln_sched_state_dir}/state_store.cc
    ${kiln_sched_state_dir}/state_store_steps.cc
    ${kiln_sched_state_dir}/step_series.cc
  PUBLIC_DEPS kiln_base nlohmann_json::nlohmann_json
  PRIVATE_DEPS SQLite::SQLite3 OpenSSL::Crypto)

kiln_tests(NAME sched_state
  SOURCES
    ${kiln_sched_state_dir}/duration_test.cc
    ${kiln_sched_state_dir}/job_spec_test.cc
    ${kiln_sched_state_dir}/secret_box_test.cc
    ${kiln_sched_state_dir}/state_store_test.cc
    ${kiln_sched_state_dir}/step_series_test.cc
  DEPS kiln_sched_state SQLite::SQLite3)
