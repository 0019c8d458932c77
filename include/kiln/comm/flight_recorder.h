// FlightRecorder: the last N ops of one rank, so a hang or a failure says which rank never
// entered which collective.
//
// Each op gets an entry when it is submitted (state "queued"), updated when it starts ("running")
// and ends ("completed" or "failed", with the error and the peer it last waited for). The dump is
// one JSON object:
//
//   {"rank":2,"world_size":4,"host":"n2","pid":4242,"dumped_at":"...","reason":"...",
//    "entries":[{"seq":17,"coll_seq":15,"op":"allreduce","bytes":4194304,"dtype":"f32",
//                "state":"failed","submitted_at":"...","started_at":"...","ended_at":"...",
//                "duration_ms":30001.2,"waiting_on_rank":1,"waiting_on_host":"n1",
//                "culprit_rank":3,"culprit_host":"n3","error":"..."}, ...]}
//
// waiting_on is the peer the op last waited for; culprit is where its failure points: a dead
// peer, or the end of the chain of waits (the rank that never entered the collective).
//
// Entries are kept in a fixed ring allocated at construction (no allocation per op except the
// error text of a failed op). Times are taken by the caller on the monotonic clock (the
// communicator reads it once at the start and once at the end of an op) and turned into wall
// time only when dumped, with the offset between the clocks measured at construction.
// Thread-safe.
#ifndef KILN_COMM_FLIGHT_RECORDER_H_
#define KILN_COMM_FLIGHT_RECORDER_H_

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/base/status.h>

namespace kiln::comm {

enum class OpState : uint8_t { kQueued, kRunning, kCompleted, kFailed };

class FlightRecorder {
 public:
  struct Identity {
    int rank = 0;
    int world_size = 1;
    std::string host;
    int pid = 0;
  };

  FlightRecorder(Identity identity, size_t capacity);

  // Records a new op; `now_ns` is monotonic. `op` and `dtype` must outlive the recorder (they
  // are stored as pointers: pass string literals or other static names).
  void record_submit(uint64_t seq, uint64_t coll_seq, const char* op, uint64_t bytes,
                     const char* dtype, int64_t now_ns);
  void record_start(uint64_t seq, int64_t now_ns);
  // A peer named in an entry: the one the op waited for, and the one its failure points at.
  struct PeerRef {
    int rank = -1;
    std::string host;
  };
  void record_end(uint64_t seq, const Status& status, const PeerRef& waiting_on,
                  const PeerRef& culprit, int64_t now_ns);

  // The dump described above. `reason` says why it was taken ("timeout", "SIGUSR1", ...).
  std::string dump_json(const std::string& reason) const;

  // Writes dump_json(reason) to `<dir>/flight-rank<R>.json` (atomically: temp file + rename).
  // Returns the path written.
  Result<std::string> dump_to_dir(const std::string& dir, const std::string& reason) const;

 private:
  struct Entry {
    uint64_t seq = UINT64_MAX;  // UINT64_MAX: unused
    uint64_t coll_seq = 0;
    const char* op = "";
    uint64_t bytes = 0;
    const char* dtype = "";
    OpState state = OpState::kQueued;
    int64_t submitted_ns = 0;  // monotonic; 0: not yet
    int64_t started_ns = 0;
    int64_t ended_ns = 0;
    PeerRef waiting_on;
    PeerRef culprit;
    std::string error;
  };
  Entry* find(uint64_t seq);  // REQUIRES: mu_ held

  const Identity identity_;
  const int64_t wall_minus_monotonic_ns_;
  mutable std::mutex mu_;
  std::vector<Entry> ring_;  // GUARDED_BY(mu_); entry for seq s lives at s % capacity
};

}  // namespace kiln::comm

#endif  // KILN_COMM_FLIGHT_RECORDER_H_
