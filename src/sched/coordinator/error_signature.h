// A job's error signatures: one line per fault that says what happened to which rank on which
// node at which step ("rank 3 on n2 killed by signal 9 (SIGKILL) at step 120"), classified so a
// person (and an alert) can tell a lost machine from a diverged run from a full disk. Read from
// the fault events' detail (recovery.cc writes it). Private to src/sched/.
#ifndef KILN_SCHED_COORDINATOR_ERROR_SIGNATURE_H_
#define KILN_SCHED_COORDINATOR_ERROR_SIGNATURE_H_

#include <cstddef>
#include <optional>

#include <kiln/sched/coordinator.h>
#include <kiln/sched/state_store.h>

namespace kiln::sched {

// The signatures a status shows (the newest ones).
inline constexpr size_t kSignaturesMax = 20;

// The signature of a "fault" event; nullopt for any other event.
//   kinds: signal (killed by a signal nobody in Kiln sent), oom, nan_loss, checkpoint (a save
//   that failed), comm (a collective failed and a peer is blamed), exit (its own error exit),
//   hang (no progress, no first step), lost (its node stopped reporting), start (not started).
std::optional<ErrorSignature> error_signature(const EventRecord& event);

}  // namespace kiln::sched

#endif  // KILN_SCHED_COORDINATOR_ERROR_SIGNATURE_H_
