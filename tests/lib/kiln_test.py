"""Helpers for Kiln's process-level tests (run by ctest with /usr/bin/python3).

The kiln binary under test comes from $KILN_BIN (ctest sets it); the repository root from
$KILN_SOURCE_DIR. Every wait here has a deadline: a test that would hang fails instead.
"""
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

KILN_BIN = os.environ.get("KILN_BIN", "kiln")
SOURCE_DIR = os.environ.get(
    "KILN_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def skip_unless_ci(test, reason):
    """Skips `test` (a unittest.TestCase) for `reason`, a thing this machine cannot do (mount a
    tmpfs without root, say), except in CI: with CI=true as root the test can always run, so the
    skip is a failure instead. A skip is also appended to $KILN_SKIP_LOG (ctest sets it under the
    build tree), which scripts/test prints at the end so that no skip passes unnoticed."""
    if os.environ.get("CI") == "true" and os.geteuid() == 0:
        test.fail(f"{test.id()} cannot run in CI (CI=true, root): {reason}")
    log = os.environ.get("KILN_SKIP_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:  # one short append per skip: whole lines
            f.write(f"{test.id()}: {reason}\n")
    test.skipTest(reason)


def run_kiln(*args, timeout=60, check=False, env=None):
    """Runs kiln with `args` (in `env`, default this process's); returns the CompletedProcess
    (text mode)."""
    return subprocess.run([KILN_BIN, *args], capture_output=True, text=True, timeout=timeout,
                          check=check, env=env)


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    """(status, body) of a GET; HTTP errors are returned, not raised. A connection that cannot
    be made (refused, reset, timed out) is status 0 with the reason as the body."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, str(e)


def wait_until(predicate, timeout_s, what):
    """Polls `predicate` every 0.1 s until it returns a truthy value, which is returned."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def stop_processes(procs, timeout_s=20):
    """SIGTERM to each process still running, then waits for all; SIGKILL for any that outlast
    `timeout_s`. For the `kiln agent --join` processes a test starts itself."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Agent:
    """A `kiln agent --json` child process; use as a context manager."""

    def __init__(self, *extra_args):
        self.args = [KILN_BIN, "agent", "--json", "--metrics-port", "0", *extra_args]
        self.proc = None
        self.port = None

    def __enter__(self):
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline()  # the "serving" event; the agent prints it at once
        if not line:
            raise AssertionError("agent exited before serving: " + self.proc.stderr.read())
        event = json.loads(line)
        assert event["event"] == "serving", event
        self.port = event["metrics_port"]
        return self

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self, timeout_s=10):
        """SIGTERM, then the exit code (SIGKILL and failure if it does not exit in time)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"agent ignored SIGTERM for {timeout_s} s")

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()
