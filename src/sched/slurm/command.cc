#include <kiln/sched/command.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>

#include <kiln/base/file_system.h>

extern char** environ;

namespace kiln::sched::slurm {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The child's environment: ours with `extra` on top.
std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) vars[std::string(*e, static_cast<size_t>(eq - *e))] = std::string(eq + 1);
  }
  for (const auto& [name, value] : extra)
    vars[name] = value;
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& [name, value] : vars)
    out.push_back(name + "=" + value);
  return out;
}

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

std::string command_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

Result<CommandOutput> run_command(const CommandSpec& spec) {
  if (spec.argv.empty()) return Status::invalid_argument("run_command: empty argv");
  const std::string what = spec.argv[0];
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return os_error(what, "pipe", errno);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    close_fd(out_pipe[0]);
    close_fd(out_pipe[1]);
    return os_error(what, "pipe", err);
  }
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&files, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&files, err_pipe[1], 2);
  if (!spec.cwd.empty()) posix_spawn_file_actions_addchdir_np(&files, spec.cwd.c_str());
  // The coordinator blocks SIGTERM/SIGINT in every thread to take them with sigwait; the tool
  // must get the default mask back or a timeout's SIGKILL would be its only way out.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<std::string> env = child_environment(spec.env);
  std::vector<char*> envp;
  for (std::string& e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.argv;
  std::vector<char*> argvp;
  for (std::string& a : args)
    argvp.push_back(a.data());
  argvp.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argvp[0], &files, &attr, argvp.data(), envp.data());
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  close_fd(out_pipe[1]);
  close_fd(err_pipe[1]);
  if (rc != 0) {
    close_fd(out_pipe[0]);
    close_fd(err_pipe[0]);
    return os_error(spec.cwd.empty() ? what : what + " in " + spec.cwd, "spawn", rc);
  }
  CommandOutput result;
  const int64_t deadline = now_ms() + spec.timeout_ms;
  bool timed_out = false;
  bool too_much = false;
  int fds[2] = {out_pipe[0], err_pipe[0]};
  std::string* sinks[2] = {&result.out, &result.err};
  while (fds[0] >= 0 || fds[1] >= 0) {
    const int64_t left = deadline - now_ms();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    const int n = poll(p, 2, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 || (p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[16384];
      const ssize_t got = read(fds[i], buf, sizeof(buf));
      if (got <= 0) {
        if (got < 0 && errno == EINTR) continue;
        close_fd(fds[i]);
        continue;
      }
      if (sinks[i]->size() + static_cast<size_t>(got) > spec.output_max) {
        too_much = true;
        break;
      }
      sinks[i]->append(buf, static_cast<size_t>(got));
    }
    if (too_much) break;
  }
  close_fd(fds[0]);
  close_fd(fds[1]);
  if (timed_out || too_much) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Status::timeout(command_line(spec.argv) + ": no answer within " +
                           std::to_string(spec.timeout_ms) + " ms (killed)");
  }
  if (too_much) {
    return Status::io_error(command_line(spec.argv) + ": printed more than " +
                            std::to_string(spec.output_max) + " bytes (killed)");
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace kiln::sched::slurm
