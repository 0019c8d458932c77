// See include/kiln/comm/flight_recorder.h.
#include <kiln/base/clock.h>
#include <kiln/comm/flight_recorder.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace kiln::comm {
namespace {

const char* state_name(OpState s) {
  switch (s) {
    case OpState::kQueued: return "queued";
    case OpState::kRunning: return "running";
    case OpState::kCompleted: return "completed";
    case OpState::kFailed: return "failed";
  }
  return "?";
}

nlohmann::ordered_json time_or_null(int64_t monotonic_ns, int64_t wall_minus_monotonic_ns) {
  return monotonic_ns == 0
             ? nlohmann::ordered_json(nullptr)
             : nlohmann::ordered_json(format_wall_time_utc(monotonic_ns + wall_minus_monotonic_ns));
}

}  // namespace

FlightRecorder::FlightRecorder(Identity identity, size_t capacity)
    : identity_(std::move(identity)),
      wall_minus_monotonic_ns_(wall_now_ns() - monotonic_now_ns()),
      ring_(capacity < 1 ? 1 : capacity) {}

FlightRecorder::Entry* FlightRecorder::find(uint64_t seq) {
  Entry& e = ring_[seq % ring_.size()];
  return e.seq == seq ? &e : nullptr;
}

void FlightRecorder::record_submit(uint64_t seq, uint64_t coll_seq, const char* op, uint64_t bytes,
                                   const char* dtype, int64_t now_ns) {
  std::lock_guard lock(mu_);
  Entry& e = ring_[seq % ring_.size()];
  // Reset field by field: the strings keep their (usually empty) buffers, nothing is allocated.
  e.waiting_on.rank = e.culprit.rank = -1;
  e.waiting_on.host.clear();
  e.culprit.host.clear();
  e.error.clear();
  e.started_ns = e.ended_ns = 0;
  e.seq = seq;
  e.coll_seq = coll_seq;
  e.op = op;
  e.bytes = bytes;
  e.dtype = dtype;
  e.state = OpState::kQueued;
  e.submitted_ns = now_ns;
}

void FlightRecorder::record_start(uint64_t seq, int64_t now_ns) {
  std::lock_guard lock(mu_);
  if (Entry* e = find(seq)) {
    e->state = OpState::kRunning;
    e->started_ns = now_ns;
  }
}

void FlightRecorder::record_end(uint64_t seq, const Status& status, const PeerRef& waiting_on,
                                const PeerRef& culprit, int64_t now_ns) {
  std::lock_guard lock(mu_);
  if (Entry* e = find(seq)) {
    e->state = status.ok() ? OpState::kCompleted : OpState::kFailed;
    e->ended_ns = now_ns;
    if (!status.ok()) {
      e->error = status.to_string();
      e->waiting_on = waiting_on;
      e->culprit = culprit;
    }
  }
}

std::string FlightRecorder::dump_json(const std::string& reason) const {
  std::lock_guard lock(mu_);
  nlohmann::ordered_json out;
  out["rank"] = identity_.rank;
  out["world_size"] = identity_.world_size;
  out["host"] = identity_.host;
  out["pid"] = identity_.pid;
  out["dumped_at"] = format_wall_time_utc(wall_now_ns());
  out["reason"] = reason;
  // Oldest first: collect the used entries and order them by seq.
  std::vector<const Entry*> used;
  for (const Entry& e : ring_) {
    if (e.seq != UINT64_MAX) used.push_back(&e);
  }
  std::sort(used.begin(), used.end(),
            [](const Entry* a, const Entry* b) { return a->seq < b->seq; });
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  const int64_t now_mono = monotonic_now_ns();
  for (const Entry* e : used) {
    nlohmann::ordered_json j;
    j["seq"] = e->seq;
    j["coll_seq"] = e->coll_seq;
    j["op"] = e->op;
    j["bytes"] = e->bytes;
    j["dtype"] = e->dtype;
    j["state"] = state_name(e->state);
    j["submitted_at"] = time_or_null(e->submitted_ns, wall_minus_monotonic_ns_);
    j["started_at"] = time_or_null(e->started_ns, wall_minus_monotonic_ns_);
    j["ended_at"] = time_or_null(e->ended_ns, wall_minus_monotonic_ns_);
    if (e->started_ns != 0) {
      const int64_t end = e->ended_ns != 0 ? e->ended_ns : now_mono;
      j["duration_ms"] = static_cast<double>(end - e->started_ns) * 1e-6;
    } else {
      j["duration_ms"] = nullptr;
    }
    if (e->state == OpState::kFailed) {
      j["waiting_on_rank"] = e->waiting_on.rank;
      j["waiting_on_host"] = e->waiting_on.host;
      j["culprit_rank"] = e->culprit.rank;
      j["culprit_host"] = e->culprit.host;
      j["error"] = e->error;
    }
    entries.push_back(std::move(j));
  }
  out["entries"] = std::move(entries);
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<std::string> FlightRecorder::dump_to_dir(const std::string& dir,
                                                const std::string& reason) const {
  const std::string path = dir + "/flight-rank" + std::to_string(identity_.rank) + ".json";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << dump_json(reason) << "\n";
    out.flush();
    if (!out) return Status::io_error("write " + tmp + " failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::io_error("rename " + tmp + " to " + path + " failed");
  }
  return path;
}

}  // namespace kiln::comm
