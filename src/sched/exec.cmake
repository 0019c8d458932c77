# kiln_sched_exec: what a node agent does with processes: starts and stops rank processes (fork,
# exec, pidfds, one epoll thread), writes and reads their per-rank logs, and reads the
# flight-recorder dumps a failed attempt left to name the rank it points at.
kiln_library(NAME sched_exec
  SOURCES
    exec/rank_process.cc
    exec/rank_log.cc
    exec/flight_culprit.cc
    exec/log_merge.cc
    exec/oom_kill.cc
  PUBLIC_DEPS kiln_base nlohmann_json::nlohmann_json
  PRIVATE_DEPS fmt::fmt)

# kiln_comm only for the test that reads a dump written by the real FlightRecorder.
kiln_tests(NAME sched_exec
  SOURCES
    exec/rank_process_test.cc
    exec/rank_log_test.cc
    exec/flight_culprit_test.cc
    exec/log_merge_test.cc
    exec/oom_kill_test.cc
  DEPS kiln_sched_exec kiln_comm)
