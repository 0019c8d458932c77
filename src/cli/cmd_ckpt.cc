// `kiln ckpt`: inspect and drill checkpoint directories (docs/ckpt.md).
//
//   kiln ckpt ls DIR [--json]       every step directory: complete, incomplete or invalid
//   kiln ckpt verify DIR [--json]   every checksum of every complete checkpoint in DIR (or of the
//                                   one step directory DIR); exit 1 naming each file that differs
//   kiln ckpt latest DIR [--json]   what a resume would load: the newest checkpoint that verifies,
//                                   and why each newer one was passed over
//   kiln ckpt write-test DIR --bytes N --steps K [...]
//                                   the drill tool: a stand-in training loop that checkpoints N
//                                   bytes of patterned state every step through AsyncCheckpointer
//                                   (optionally throttled so a write can be killed half-way),
//                                   and with --resume first loads and checks the newest
//                                   checkpoint. tests/ckpt and bench/ckpt/run drive it.
//
// --json prints one JSON object per line. write-test's events:
//   {"event":"fresh"} | {"event":"resumed","step","path"}
//   {"event":"skipped_checkpoint","step","path","reason"}   (newer ones a resume passed over)
//   {"event":"set_aside","step","path"}   (a passed-over one with a manifest, moved aside)
//   {"event":"save","step","outcome","wait_ms","copy_ms","stall_ms"}
//   {"event":"written","step","bytes","write_ms","write_mib_per_s","committed"}
//   {"event":"write_failed","step","error"}
//   {"event":"done","steps","started","waited","skipped","failed","pinned"}
#include <kiln/base/clock.h>
#include <kiln/ckpt/async_checkpointer.h>
#include <kiln/ckpt/catalog.h>
#include <kiln/ckpt/checkpoint.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "cli/command.h"

namespace kiln::cli {
namespace {

// write-test limits: a drill state above 64 GiB or a run of more than a million steps is a typo.
constexpr size_t kDrillBytesMax = size_t{64} << 30;
constexpr int64_t kDrillStepsMax = 1'000'000;
// write-test's final wait for the last write; a drill write that takes an hour is broken.
constexpr int64_t kDrillFinalWaitMs = 60 * 60 * 1000;

struct CkptFlags {
  std::string dir;
  bool json = false;
  // write-test
  std::string bytes = "64M";
  int64_t steps = 3;
  int keep = 2;
  std::string policy = "wait";
  std::string throttle;  // bytes per second, with K/M/G; empty: unthrottled
  std::string chunk;     // write chunk; empty: the library's default
  int64_t step_ms = 0;
  bool resume = false;
  bool early_writeback = false;
  bool no_pin = false;
};

void print_json(const nlohmann::ordered_json& j) {
  std::cout << j.dump() << std::endl;  // flushed: tests read events while the process runs
}

// Milliseconds, rounded to microseconds so JSON shows 0.054, not 0.05371000000000001.
double ms(double seconds) {
  return std::round(seconds * 1e6) / 1e3;
}

// ---- ls ----

int run_ls(const CkptFlags& f) {
  Result<std::vector<ckpt::CheckpointInfo>> listed = ckpt::list_checkpoints(f.dir);
  if (!listed.ok()) return report_error("ckpt ls", listed.status());
  if (!f.json) {
    std::cout << std::left << std::setw(12) << "step" << std::setw(12) << "state" << std::setw(7)
              << "world" << std::setw(14) << "bytes" << std::setw(30) << "created"
              << "problem\n";
  }
  for (const ckpt::CheckpointInfo& info : *listed) {
    const bool complete = info.state == ckpt::CheckpointState::kComplete;
    if (f.json) {
      nlohmann::ordered_json j;
      j["step"] = info.step;
      j["path"] = info.path;
      j["state"] = ckpt::checkpoint_state_name(info.state);
      if (complete) {
        j["world_size"] = info.manifest.world;
        j["total_bytes"] = info.manifest.total_bytes;
        j["created_utc"] = info.manifest.created_utc;
      } else {
        j["problem"] = info.problem;
      }
      print_json(j);
      continue;
    }
    std::cout << std::left << std::setw(12) << info.step << std::setw(12)
              << ckpt::checkpoint_state_name(info.state) << std::setw(7)
              << (complete ? std::to_string(info.manifest.world) : "-") << std::setw(14)
              << (complete ? std::to_string(info.manifest.total_bytes) : "-") << std::setw(30)
              << (complete ? info.manifest.created_utc : "-") << info.problem << "\n";
  }
  if (!f.json) std::cout << listed->size() << " step directories\n";
  return kExitOk;
}

// ---- verify ----

// Verifies one step directory and prints it; returns its status.
Status verify_one(const std::string& step_dir, int64_t step, bool json) {
  std::vector<ckpt::FileVerdict> verdicts;
  const Status status = ckpt::verify_checkpoint(step_dir, &verdicts);
  if (json) {
    nlohmann::ordered_json j;
    j["step"] = step;
    j["path"] = step_dir;
    j["ok"] = status.ok();
    j["files"] = nlohmann::ordered_json::array();
    for (const ckpt::FileVerdict& v : verdicts) {
      nlohmann::ordered_json file;
      file["name"] = v.record.name;
      file["size_bytes"] = v.record.size_bytes;
      file["ok"] = v.status.ok();
      if (!v.status.ok()) file["error"] = v.status.message();
      j["files"].push_back(file);
    }
    if (!status.ok()) j["error"] = status.message();
    print_json(j);
    return status;
  }
  std::cout << step_dir << ": " << (status.ok() ? "ok" : "FAILED");
  if (status.ok()) std::cout << " (" << verdicts.size() << " files)";
  std::cout << "\n";
  for (const ckpt::FileVerdict& v : verdicts) {
    if (!v.status.ok()) std::cout << "  " << v.status.message() << "\n";
  }
  if (verdicts.empty() && !status.ok()) std::cout << "  " << status.message() << "\n";
  return status;
}

int run_verify(const CkptFlags& f) {
  std::string name = f.dir;
  while (name.size() > 1 && name.back() == '/')
    name.pop_back();
  const int64_t own_step = ckpt::parse_step_dir_name(name.substr(name.find_last_of('/') + 1));
  if (own_step >= 0) {
    const Status status = verify_one(name, own_step, f.json);
    return status.ok() ? kExitOk : report_error("ckpt verify", status);
  }
  Result<std::vector<ckpt::CheckpointInfo>> listed = ckpt::list_checkpoints(f.dir);
  if (!listed.ok()) return report_error("ckpt verify", listed.status());
  int verified = 0;
  std::string failures;
  for (const ckpt::CheckpointInfo& info : *listed) {
    if (info.state == ckpt::CheckpointState::kIncomplete) {
      if (!f.json)
        std::cout << info.path << ": incomplete, not a checkpoint (" << info.problem << ")\n";
      continue;
    }
    ++verified;
    const Status status = verify_one(info.path, info.step, f.json);
    if (!status.ok()) failures += (failures.empty() ? "" : "; ") + status.message();
  }
  if (!f.json) std::cout << verified << " checkpoints verified\n";
  if (!failures.empty()) return report_error("ckpt verify", Status::corruption(failures));
  return kExitOk;
}

// ---- latest ----

// Prints the checkpoints a resume passed over (write-test uses it too).
void print_skipped(const std::vector<ckpt::SkippedCheckpoint>& skipped, bool json) {
  for (const ckpt::SkippedCheckpoint& s : skipped) {
    if (json) {
      nlohmann::ordered_json j;
      j["event"] = "skipped_checkpoint";
      j["step"] = s.step;
      j["path"] = s.path;
      j["reason"] = s.reason.message();
      print_json(j);
    } else {
      std::cout << "passed over step " << s.step << ": " << s.reason.message() << "\n";
    }
  }
}

int run_latest(const CkptFlags& f) {
  Result<ckpt::ResumeChoice> choice = ckpt::find_resume_checkpoint(f.dir);
  if (!choice.ok()) return report_error("ckpt latest", choice.status());
  if (f.json) {
    nlohmann::ordered_json j;
    j["chosen"] = nullptr;
    if (choice->chosen) {
      j["chosen"] = {{"step", choice->chosen->step}, {"path", choice->chosen->path}};
    }
    j["skipped"] = nlohmann::ordered_json::array();
    for (const ckpt::SkippedCheckpoint& s : choice->skipped) {
      j["skipped"].push_back({{"step", s.step}, {"path", s.path}, {"reason", s.reason.message()}});
    }
    print_json(j);
    return kExitOk;
  }
  print_skipped(choice->skipped, false);
  if (choice->chosen) {
    std::cout << "resume from step " << choice->chosen->step << ": " << choice->chosen->path
              << "\n";
  } else {
    std::cout << "no checkpoint to resume from in " << f.dir << ": a fresh start\n";
  }
  return kExitOk;
}

// ---- write-test ----

// The drill's state at `step`: a pattern no two steps share, cheap to fill and to check.
uint64_t drill_word(int64_t step, size_t i) {
  return (static_cast<uint64_t>(step) * 0x9e3779b97f4a7c15ULL) ^ (i * 0xbf58476d1ce4e5b9ULL);
}

void fill_drill_state(std::vector<uint64_t>* words, int64_t step) {
  for (size_t i = 0; i < words->size(); ++i)
    (*words)[i] = drill_word(step, i);
}

// Loads rank 0's shard of the chosen checkpoint and checks it holds exactly step's pattern.
Status check_resumed_state(const ckpt::CheckpointInfo& chosen, size_t bytes) {
  KILN_ASSIGN_OR_RETURN(const ckpt::SafetensorsFile shard,
                        ckpt::load_shard(chosen.path, chosen.manifest, 0));
  KILN_ASSIGN_OR_RETURN(const ckpt::TensorEntry state, shard.get("state"));
  if (state.bytes.size() != bytes) {
    return Status::invalid_argument(shard.path() + ": state has " +
                                    std::to_string(state.bytes.size()) + " bytes; --bytes says " +
                                    std::to_string(bytes));
  }
  std::vector<uint64_t> expected((bytes + 7) / 8);
  fill_drill_state(&expected, chosen.step);
  if (std::memcmp(expected.data(), state.bytes.data(), bytes) != 0) {
    return Status::corruption(shard.path() + ": state is not step " + std::to_string(chosen.step) +
                              "'s pattern");
  }
  return Status();
}

struct DrillCounts {
  int64_t started = 0, waited = 0, skipped = 0, failed = 0;
};

void report_completed(ckpt::AsyncCheckpointer& checkpointer, bool json, DrillCounts* counts) {
  for (const ckpt::CompletedSave& done : checkpointer.take_completed()) {
    nlohmann::ordered_json j;
    j["event"] = done.status.ok() ? "written" : "write_failed";
    j["step"] = done.step;
    if (done.status.ok()) {
      j["bytes"] = done.record.size_bytes;
      j["write_ms"] = ms(done.write_seconds);
      j["write_mib_per_s"] =
          static_cast<double>(done.record.size_bytes) / (1 << 20) / done.write_seconds;
      j["committed"] = done.committed;
    } else {
      ++counts->failed;
      j["error"] = done.status.message();
      std::cerr << "kiln ckpt write-test: " << done.status.to_string() << "\n";
    }
    if (json) {
      print_json(j);
    } else {
      std::cout << "step " << done.step << ": "
                << (done.status.ok()
                        ? "written in " + std::to_string(ms(done.write_seconds)) + " ms"
                        : "FAILED: " + done.status.message())
                << std::endl;
    }
  }
}

Result<ckpt::AsyncCheckpointerOptions> drill_options(const CkptFlags& f, size_t bytes,
                                                     const Logger& log) {
  ckpt::AsyncCheckpointerOptions o;
  o.dir = f.dir;
  o.keep_last = f.keep;
  o.log = log;
  o.pin_staging = !f.no_pin;
  o.write.early_writeback = f.early_writeback;
  // Allocated up front as a trainer would (the state size is known); the slack covers the
  // drill's safetensors header, a few hundred bytes.
  o.staging_bytes = bytes + (size_t{64} << 10);
  KILN_ASSIGN_OR_RETURN(o.policy, ckpt::parse_overlap_policy(f.policy));
  if (!f.throttle.empty()) {
    KILN_ASSIGN_OR_RETURN(const size_t rate, parse_bytes(f.throttle));
    o.write.bytes_per_s_max = rate;
  }
  if (!f.chunk.empty()) {
    KILN_ASSIGN_OR_RETURN(o.write.chunk_bytes, parse_bytes(f.chunk));
  }
  return o;
}

int run_write_test(const CkptFlags& f, const GlobalOptions& globals) {
  std::shared_ptr<LogSink> sink = open_log_sink(globals);
  if (!sink) return kExitBadInput;
  const Logger log(sink, "ckpt");
  Result<size_t> bytes = parse_bytes(f.bytes);
  if (!bytes.ok()) return report_error("ckpt write-test", bytes.status().with_context("--bytes"));
  if (*bytes == 0 || *bytes > kDrillBytesMax) {
    return report_error("ckpt write-test", Status::invalid_argument("--bytes is 0 or too large"));
  }
  Result<ckpt::AsyncCheckpointerOptions> options = drill_options(f, *bytes, log);
  if (!options.ok()) return report_error("ckpt write-test", options.status());

  int64_t first_step = 1;
  if (f.resume) {
    Result<ckpt::ResumeChoice> choice = ckpt::find_resume_checkpoint(f.dir);
    if (!choice.ok()) return report_error("ckpt write-test", choice.status());
    print_skipped(choice->skipped, f.json);
    // As a trainer does: newer checkpoints with a manifest but bad contents are moved aside, so
    // the steps about to be redone can be written (a directory with a manifest never is).
    for (const ckpt::SkippedCheckpoint& s : choice->skipped) {
      if (s.reason.is_not_found()) continue;  // no manifest: simply written over
      Result<std::string> moved = ckpt::set_aside_checkpoint(s.path);
      if (!moved.ok()) return report_error("ckpt write-test", moved.status());
      if (f.json) print_json({{"event", "set_aside"}, {"step", s.step}, {"path", *moved}});
    }
    if (choice->chosen) {
      const Status checked = check_resumed_state(*choice->chosen, *bytes);
      if (!checked.ok()) return report_error("ckpt write-test", checked.with_context("resume"));
      first_step = choice->chosen->step + 1;
      if (f.json) {
        print_json(
            {{"event", "resumed"}, {"step", choice->chosen->step}, {"path", choice->chosen->path}});
      } else {
        std::cout << "resumed from step " << choice->chosen->step << std::endl;
      }
    }
  }
  if (first_step == 1 && f.json) print_json({{"event", "fresh"}});

  Result<std::unique_ptr<ckpt::AsyncCheckpointer>> checkpointer =
      ckpt::AsyncCheckpointer::create(*options);
  if (!checkpointer.ok()) return report_error("ckpt write-test", checkpointer.status());
  std::vector<uint64_t> words((*bytes + 7) / 8);
  int64_t step_value = 0;
  const std::vector<ckpt::TensorRef> tensors = {
      {"state", ckpt::DType::kU8, {static_cast<int64_t>(*bytes)}, words.data()},
      {"step", ckpt::DType::kI64, {1}, &step_value}};
  DrillCounts counts;
  for (int64_t step = first_step; step <= f.steps; ++step) {
    fill_drill_state(&words, step);  // "training"
    step_value = step;
    if (f.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(f.step_ms));
    ckpt::SaveRequest request;
    request.step = step;
    request.tensors = tensors;
    request.manifest_metadata_json = nlohmann::json({{"drill_bytes", *bytes}}).dump();
    Result<ckpt::SaveTicket> ticket = (*checkpointer)->save(request);
    if (!ticket.ok()) return report_error("ckpt write-test", ticket.status());
    counts.started += ticket->outcome == ckpt::SaveOutcome::kStarted;
    counts.waited += ticket->outcome == ckpt::SaveOutcome::kWaited;
    counts.skipped += ticket->outcome == ckpt::SaveOutcome::kSkipped;
    report_completed(**checkpointer, f.json, &counts);  // what finished while we waited
    if (f.json) {
      print_json({{"event", "save"},
                  {"step", step},
                  {"outcome", ckpt::save_outcome_name(ticket->outcome)},
                  {"wait_ms", ms(ticket->wait_seconds)},
                  {"copy_ms", ms(ticket->copy_seconds)},
                  {"stall_ms", ms(ticket->stall_seconds())}});
    } else {
      std::cout << "step " << step << ": " << ckpt::save_outcome_name(ticket->outcome) << ", stall "
                << ms(ticket->stall_seconds()) << " ms" << std::endl;
    }
  }
  const Status idle = (*checkpointer)->wait_idle(Deadline::after_ms(kDrillFinalWaitMs));
  if (!idle.ok()) return report_error("ckpt write-test", idle);
  report_completed(**checkpointer, f.json, &counts);
  nlohmann::ordered_json done = {{"event", "done"},
                                 {"steps", f.steps},
                                 {"started", counts.started},
                                 {"waited", counts.waited},
                                 {"skipped", counts.skipped},
                                 {"failed", counts.failed},
                                 {"pinned", (*checkpointer)->staging_pinned()}};
  if (f.json) {
    print_json(done);
  } else {
    std::cout << "done: " << counts.started << " started, " << counts.waited << " waited, "
              << counts.skipped << " skipped, " << counts.failed << " failed\n";
  }
  return counts.failed == 0 ? kExitOk : kExitFailure;
}

CLI::App* add_dir_command(CLI::App* ckpt_app, const char* name, const char* help,
                          CkptFlags* flags) {
  CLI::App* app = ckpt_app->add_subcommand(name, help);
  app->add_option("dir", flags->dir, "checkpoint directory")->required();
  app->add_flag("--json", flags->json, "one JSON object per line");
  return app;
}

}  // namespace

Command add_ckpt_command(CLI::App& parent) {
  auto flags = std::make_shared<CkptFlags>();
  CLI::App* app = parent.add_subcommand("ckpt", "Inspect, verify and drill checkpoint directories");
  app->require_subcommand(1);
  app->fallthrough();
  CLI::App* ls =
      add_dir_command(app, "ls", "List the step directories and their state", flags.get());
  CLI::App* verify = add_dir_command(
      app, "verify", "Check every file's size and XXH3 against its manifest; exit 1 on mismatch",
      flags.get());
  CLI::App* latest = add_dir_command(
      app, "latest", "Show the checkpoint a resume would load, and why newer ones were passed over",
      flags.get());
  CLI::App* drill = add_dir_command(
      app, "write-test",
      "Drill: checkpoint patterned state every step through the async writer (docs/ckpt.md)",
      flags.get());
  drill->add_option("--bytes", flags->bytes, "state size (K, M, G suffixes)")
      ->capture_default_str();
  drill->add_option("--steps", flags->steps, "last step to run")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, kDrillStepsMax));
  drill->add_option("--keep", flags->keep, "complete checkpoints to keep (0: all)")
      ->capture_default_str()
      ->check(CLI::Range(0, ckpt::kKeepLastMax));
  drill->add_option("--policy", flags->policy, "a request during a write: wait or skip")
      ->capture_default_str();
  drill->add_option("--throttle", flags->throttle,
                    "cap the write rate, bytes per second (e.g. 4M)");
  drill->add_option("--chunk", flags->chunk, "bytes per write() call");
  drill->add_option("--step-ms", flags->step_ms, "simulated compute per step")
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}));
  drill->add_flag("--resume", flags->resume,
                  "load and check the newest checkpoint that verifies, continue after it");
  drill->add_flag("--early-writeback", flags->early_writeback,
                  "start writeback after every chunk instead of only fsyncing at the end");
  drill->add_flag("--no-pin", flags->no_pin, "do not mlock the staging buffer");
  return {app, [=](const GlobalOptions& globals) {
            if (ls->parsed()) return run_ls(*flags);
            if (verify->parsed()) return run_verify(*flags);
            if (latest->parsed()) return run_latest(*flags);
            if (drill->parsed()) return run_write_test(*flags, globals);
            return kExitBadInput;
          }};
}

}  // namespace kiln::cli
