// `kiln ops-check [--json] [--isa scalar|avx2|avx512] [--seed N] [--threads N]`: runs every
// kiln_ops op on every ISA this CPU supports (or the one asked for) against the double-precision
// references, and prints one row per op, ISA and shape (see src/ops/check/ops_check.h). Exits 1
// if any row is not ok, so a node whose kernels compute wrong results fails preflight.
//
// --json prints one JSON object per line: op, isa, shape, max_rel_err (null when infinite: a
// non-finite value where a finite one was wanted, or a mismatch of ids or bf16 bits), tolerance,
// ok, and worst (the buffer of the largest error) and error when present.
#include <kiln/base/cpu.h>
#include <kiln/base/thread_pool.h>
#include <kiln/ops/context.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "ops/check/ops_check.h"

namespace kiln::cli {
namespace {

// More threads than this is a typo, not a machine (the pool starts them all).
constexpr int kThreadsMax = 1024;

struct OpsCheckOptions {
  bool json = false;
  std::string isa;  // empty: every ISA this CPU runs
  uint64_t seed = 1;
  int threads = 0;  // 0: one per hardware thread
};

void print_json(const ops::OpCheckRow& row) {
  nlohmann::ordered_json out;
  out["op"] = row.op;
  out["isa"] = cpu_isa_name(row.isa);
  if (!row.gemm.empty()) out["gemm"] = row.gemm;
  out["shape"] = row.shape;
  out["max_rel_err"] = row.max_rel_err;
  out["tolerance"] = row.tolerance;
  out["ok"] = row.ok;
  if (!row.worst.empty()) out["worst"] = row.worst;
  if (!row.error.empty()) out["error"] = row.error;
  std::cout << out.dump() << "\n";
}

void print_table(const std::vector<ops::OpCheckRow>& rows) {
  std::cout << std::left << std::setw(24) << "op" << std::setw(8) << "isa" << std::setw(12)
            << "max_rel_err" << std::setw(11) << "tolerance" << std::setw(6) << "ok"
            << "shape\n";
  int failed = 0;
  for (const ops::OpCheckRow& row : rows) {
    failed += row.ok ? 0 : 1;
    std::ostringstream err;
    err << std::setprecision(2) << std::scientific << row.max_rel_err;
    std::ostringstream tol;
    tol << std::setprecision(1) << std::scientific << row.tolerance;
    std::cout << std::left << std::setw(24) << row.op << std::setw(8) << cpu_isa_name(row.isa)
              << std::setw(12) << (row.error.empty() ? err.str() : "-") << std::setw(11)
              << tol.str() << std::setw(6) << (row.ok ? "ok" : "FAIL") << row.shape
              << (row.gemm.empty() ? std::string() : " gemm=" + row.gemm);
    if (!row.ok && !row.worst.empty()) std::cout << "  (worst: " << row.worst << ")";
    std::cout << "\n";
    if (!row.error.empty()) std::cout << "    error: " << row.error << "\n";
  }
  std::cout << rows.size() << " checks, " << failed << " failed\n";
}

int run_ops_check_command(const OpsCheckOptions& options) {
  std::vector<CpuIsa> isas = ops::supported_isas();
  if (!options.isa.empty()) {
    Result<CpuIsa> isa = parse_cpu_isa(options.isa);
    if (!isa.ok()) return report_error("ops-check", isa.status().with_context("--isa"));
    bool supported = false;
    for (CpuIsa s : isas)
      supported |= s == *isa;
    if (!supported) {
      return report_error(
          "ops-check", Status::not_supported("--isa " + options.isa + ": this CPU cannot run it"));
    }
    isas = {*isa};
  }
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  Result<std::unique_ptr<ThreadPool>> pool = ThreadPool::create(threads);
  if (!pool.ok()) return report_error("ops-check", pool.status().with_context("--threads"));
  const std::vector<ops::OpCheckRow> rows =
      ops::run_ops_check(isas, threads > 1 ? pool->get() : nullptr, options.seed);
  bool all_ok = true;
  for (const ops::OpCheckRow& row : rows) {
    all_ok &= row.ok;
    if (options.json) print_json(row);
  }
  if (!options.json) print_table(rows);
  return all_ok ? kExitOk : kExitFailure;
}

}  // namespace

Command add_ops_check_command(CLI::App& parent) {
  auto options = std::make_shared<OpsCheckOptions>();
  CLI::App* app = parent.add_subcommand(
      "ops-check", "Check every kiln_ops op on every ISA against its double-precision reference");
  app->add_flag("--json", options->json, "print one JSON object per check");
  app->add_option("--isa", options->isa, "check only this ISA: scalar, avx2 or avx512");
  app->add_option("--seed", options->seed, "seed of the random inputs")->capture_default_str();
  app->add_option("--threads", options->threads, "threads for the ops (default: one per CPU)")
      ->check(CLI::Range(1, kThreadsMax));
  return {app, [options](const GlobalOptions&) { return run_ops_check_command(*options); }};
}

}  // namespace kiln::cli
