# kiln_sched proper: state machines, the policy, the coordinator and its API, the node agent, and
# the Slurm executor (slurm/: sbatch, squeue, sinfo, scontrol, scancel with timeouts).
kiln_library(NAME sched
  SOURCES
    agent/node_agent.cc
    agent/probe.cc
    coordinator/api.cc
    coordinator/auth.cc
    coordinator/coordinator.cc
    coordinator/daemons.cc
    coordinator/external.cc
    coordinator/error_signature.cc
    coordinator/gate.cc
    coordinator/job_detail.cc
    coordinator/lifecycle.cc
    coordinator/node_preflight.cc
    coordinator/preflight_gate.cc
    coordinator/queue_config.cc
    coordinator/recovery.cc
    coordinator/reports.cc
    coordinator/step_json.cc
    coordinator/step_record.cc
    coordinator/ui_routes.cc
    slurm/command.cc
    slurm/slurm_executor.cc
    slurm/slurm_parse.cc
  PUBLIC_DEPS kiln_sched_policy kiln_sched_state kiln_sched_exec kiln_preflight kiln_ckpt kiln_obs
              kiln_launch
              kiln_base nlohmann_json::nlohmann_json
  PRIVATE_DEPS kiln_ui fmt::fmt OpenSSL::Crypto)

kiln_tests(NAME sched
  SOURCES
    agent/probe_test.cc
    coordinator/api_test.cc
    coordinator/auth_test.cc
    coordinator/coordinator_test.cc
    coordinator/error_signature_test.cc
    coordinator/lifecycle_test.cc
    coordinator/external_test.cc
    coordinator/queue_config_test.cc
    core/states_test.cc
    slurm/command_test.cc
    slurm/slurm_parse_test.cc
  DEPS kiln_sched)
