#include <kiln/sched/daemons.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include <kiln/base/clock.h>
#include <kiln/base/file_system.h>

extern char** environ;

namespace kiln::sched {

Result<pid_t> spawn_detached(const DaemonSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty() || spec.argv[0][0] != '/') {
    return Status::invalid_argument("a daemon's argv[0] must be an absolute path");
  }
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, spec.output_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0640);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
  std::vector<char*> argv;
  for (const std::string& a : spec.argv)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // This process's environment with spec.env over it.
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool overridden = false;
    for (const auto& [key, value] : spec.env)
      overridden = overridden || entry.rfind(key + "=", 0) == 0;
    if (!overridden) env_text.push_back(entry);
  }
  for (const auto& [key, value] : spec.env)
    env_text.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (std::string& e : env_text)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &files, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&files);
  if (rc != 0) return os_error(spec.argv[0], "posix_spawn", rc);
  return pid;
}

bool daemon_alive(pid_t pid, const std::vector<std::string>& markers) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : cmdline)
    if (c == '\0') c = ' ';
  // A zombie (ours, not yet reaped) has an empty command line: it is not alive.
  if (cmdline.empty()) return false;
  for (const std::string& m : markers)
    if (cmdline.find(m) == std::string::npos) return false;
  return true;
}

Result<std::string> wait_for_json_line(const std::string& path, const std::string& key,
                                       int64_t timeout_ms) {
  const Deadline deadline = Deadline::after_ms(timeout_ms);
  std::string seen;
  while (true) {
    std::ifstream in(path);
    std::string line;
    seen.clear();
    while (std::getline(in, line)) {
      if (seen.size() < 4096) seen += line + "\n";
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains(key)) return line;
    }
    if (deadline.expired()) {
      return Status::timeout("no line with '" + key + "' in " + path + " within " +
                             std::to_string(timeout_ms) + " ms; it holds: " + seen);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace kiln::sched
