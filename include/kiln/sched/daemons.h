// Processes `kiln serve` keeps beside itself: the rendezvous store daemon and, for the embedded
// local cluster, one node agent per local node. They run detached (a session of their own, stdin
// from /dev/null, output to a file) so that killing the coordinator, even with SIGKILL, leaves
// them and the ranks they own running; a restarted coordinator finds them by the pids it wrote
// into its state and adopts them instead of starting new ones.
#ifndef KILN_SCHED_DAEMONS_H_
#define KILN_SCHED_DAEMONS_H_

#include <sys/types.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <kiln/base/result.h>

namespace kiln::sched {

struct DaemonSpec {
  std::vector<std::string> argv;  // argv[0] an absolute path
  std::string output_path;        // stdout and stderr, appended
  // Added to this process's environment (these win).
  std::vector<std::pair<std::string, std::string>> env;
};

// Starts `spec` in a new session with no signal blocked. kIoError names argv[0] or the output.
Result<pid_t> spawn_detached(const DaemonSpec& spec);

// True when `pid` runs and its command line holds every one of `markers` (so a pid reused by an
// unrelated process is not taken for ours).
bool daemon_alive(pid_t pid, const std::vector<std::string>& markers);

// Waits up to timeout_ms for `path` to hold a line that parses as a JSON object with `key`, and
// returns that line. kTimeout names the path (and says what the file holds so far).
Result<std::string> wait_for_json_line(const std::string& path, const std::string& key,
                                       int64_t timeout_ms);

}  // namespace kiln::sched

#endif  // KILN_SCHED_DAEMONS_H_
