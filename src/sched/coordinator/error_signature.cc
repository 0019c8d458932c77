// Error signatures from fault events (error_signature.h).
#include "sched/coordinator/error_signature.h"

#include <string.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace kiln::sched {
namespace {

using json = nlohmann::json;

template <typename T>
T get_or(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return fallback;
  }
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool has(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

// What a program's own last words say went wrong; empty when they say nothing we know.
std::string kind_of_error(const std::string& error) {
  const std::string e = lower(error);
  if (has(e, "not finite") || has(e, "loss is nan") || has(e, "loss is inf") ||
      has(e, "diverged")) {
    return "nan_loss";
  }
  if (has(e, "out of memory") || has(e, "bad_alloc") || has(e, "cannot allocate memory")) {
    return "oom";
  }
  if (has(e, "checkpoint") || has(e, "no space left") || has(e, "disk quota")) {
    return "checkpoint";
  }
  if (has(e, "collective") || has(e, "peer") || has(e, "comm ")) return "comm";
  return "";
}

std::string signal_name(int sig) {
  const char* abbrev = sig > 0 ? sigabbrev_np(sig) : nullptr;
  return "signal " + std::to_string(sig) +
         (abbrev != nullptr ? " (SIG" + std::string(abbrev) + ")" : "");
}

}  // namespace

std::optional<ErrorSignature> error_signature(const EventRecord& event) {
  if (event.type != "fault" || !event.detail.is_object()) return std::nullopt;
  const json& d = event.detail;
  ErrorSignature sig;
  sig.attempt = event.attempt;
  sig.rank = get_or<int>(d, "rank", -1);
  sig.node = get_or<std::string>(d, "node", "");
  sig.step = get_or<int64_t>(d, "step", -1);
  const std::string cause = get_or<std::string>(d, "cause", "");
  const std::string message = get_or<std::string>(d, "message", "");
  const std::string error = get_or<std::string>(d, "error", "");
  const std::string at = sig.step >= 0 ? " at step " + std::to_string(sig.step) : "";
  std::string who = sig.rank >= 0 ? "rank " + std::to_string(sig.rank) : "the job";
  if (!sig.node.empty()) who += " on " + sig.node;
  // A program's own words, when it said something, are the most precise account there is.
  const std::string said = error.empty() ? "" : ": " + error;

  if (cause == "node_lost") {
    sig.kind = "lost";
    sig.text = (sig.node.empty() ? who : "node " + sig.node) + " lost" + at + ": " + message;
  } else if (cause == "hung" || cause == "start_timeout") {
    sig.kind = "hang";
    sig.text = who + (cause == "hung" ? " made no progress" : " never reached its first step") +
               at + ": " + message;
  } else if (cause == "start_failed") {
    sig.kind = "start";
    sig.text = who + " could not start: " + message;
  } else if (d.contains("signal")) {
    const int signal = get_or<int>(d, "signal", 0);
    const int reporter = get_or<int>(d, "reporter", sig.rank);
    const std::string kind = kind_of_error(error);
    // The kernel's log named the OOM killer (the agent read it), or the program said so.
    const bool oom = get_or<bool>(d, "oom", false);
    sig.kind = oom || kind == "oom" ? "oom" : "signal";
    sig.text = (reporter == sig.rank ? who : "rank " + std::to_string(reporter)) +
               (oom ? " killed by the kernel's OOM killer (" + signal_name(signal) + ")"
                    : " killed by " + signal_name(signal)) +
               at + (kind == "oom" ? said : "");
    if (reporter != sig.rank) sig.text += "; " + get_or<std::string>(d, "blamed_by", who);
  } else {
    const int reporter = get_or<int>(d, "reporter", sig.rank);
    const std::string blamed_by = get_or<std::string>(d, "blamed_by", "");
    const std::string kind = kind_of_error(error);
    if (reporter != sig.rank && !blamed_by.empty()) {
      // Its collective failed because a peer died or hung: the peer is the culprit.
      sig.kind = "comm";
      sig.text = "rank " + std::to_string(reporter) + "'s collective failed" + at + "; " +
                 blamed_by + " (" + who + ")" + said;
    } else {
      sig.kind = kind.empty() ? "exit" : kind;
      const int code = get_or<int>(d, "exit_code", -1);
      const std::string what = sig.kind == "nan_loss"     ? " stopped: the loss is not finite"
                               : sig.kind == "checkpoint" ? " failed to checkpoint"
                               : sig.kind == "oom"        ? " ran out of memory"
                               : sig.kind == "comm"       ? " failed in a collective"
                                                    : " exited with code " + std::to_string(code);
      sig.text = who + what + at + said;
    }
  }
  return sig;
}

}  // namespace kiln::sched
