// `kiln logs JOB [--rank R] [--attempt A] [--level L] [--grep RE] [--since T] [--follow]`: what
// a job's ranks wrote, read from their node agents through the coordinator. Without --rank,
// every rank of the attempt merged in time order, each line with its time, rank and node
// (kiln/sched/log_merge.h); with --rank, that rank's lines as it wrote them. --json: records
// with ts, rank, node, stream, level and line either way.
#ifndef KILN_CLI_CMD_LOGS_H_
#define KILN_CLI_CMD_LOGS_H_

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "cli/command.h"

namespace kiln::cli {

// Adds the `logs` subcommand to `parent`.
Command add_logs_command(CLI::App& parent);

}  // namespace kiln::cli

#endif  // KILN_CLI_CMD_LOGS_H_
