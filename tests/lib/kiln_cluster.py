"""A `kiln serve --local-nodes N` cluster for process-level tests of the coordinator.

Cluster starts the coordinator with a fresh state directory and a free port, waits for its
agents to register, and runs client commands against it. Everything it starts is found again
from the coordinator's own state (the pids of the store daemon and the agents in SQLite's
settings table) so that teardown ends every process, even after the test killed the coordinator
with SIGKILL or restarted it. Every wait has a deadline.
"""
import json
import os
import signal
import sqlite3
import subprocess
import tempfile
import time

from kiln_test import KILN_BIN, SOURCE_DIR, free_port, wait_until


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def is_kiln(pid):
    """Whether `pid` runs the kiln binary under test (a pid reused by anything else is not ours)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0].decode() == KILN_BIN
    except OSError:
        return False


class Cluster:
    def __init__(self, nodes=4, slots=2, extra=(), state_dir=None, token=None, ca_cert=None,
                 executor="local", env=None, local_nodes=None, bind=None, wrap=None, kiln=None):
        """`executor`: "local" starts `nodes` agents on this host; "slurm" starts none (the
        nodes are Slurm's, `env` carries SLURM_CONF) and waits for `nodes` of them.
        `local_nodes`: with the local executor, how many of the `nodes` `kiln serve` starts
        itself (default all; 0 when the test starts its agents with `kiln agent --join`).
        `bind`: the API address (default 127.0.0.1). `wrap`: argv -> argv for every process this
        class starts, the coordinator and its clients (a fake host's namespace: fakehosts.py).
        `kiln`: the binary `kiln serve` runs (default KILN_BIN; `kiln_path` may change it between
        a stop and a start: an upgrade); clients always run KILN_BIN."""
        self.kiln_path = kiln or KILN_BIN
        self.nodes = nodes
        self.local_nodes = nodes if local_nodes is None else local_nodes
        self.bind = bind or "127.0.0.1"
        self.wrap = wrap or (lambda argv: argv)
        self.executor = executor
        self.serve_env = env or {}
        self.slots = slots
        self.extra = list(extra)
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-cluster-")
        self.state = state_dir or os.path.join(self.tmp.name, "state")
        self.port = free_port()
        # With --tls-cert in `extra`, pass the certificate as ca_cert: the clients trust it.
        self.ca_cert = ca_cert
        self.url = f"{'https' if ca_cert else 'http'}://{self.bind}:{self.port}"
        self.proc = None
        self.token = token  # None: the admin token the local default makes

    # --- the coordinator process
    def start(self, wait_nodes=True):
        log = open(os.path.join(self.tmp.name, "serve.err"), "a")
        self.proc = subprocess.Popen(
            self.wrap([self.kiln_path, "--log-file", os.path.join(self.tmp.name, "serve.log"), "serve",
                       "--state-dir", self.state, "--port", str(self.port), "--bind", self.bind,
                       "--local-nodes", str(self.local_nodes if self.executor == "local" else 0),
                       "--executor", self.executor, "--slots-per-node", str(self.slots), "--json",
                       # Tests share one host, whose load is theirs: the load check would
                       # cordon nodes at random (health_test.cc and the test below pin it).
                       *([] if "--health-load-per-cpu" in self.extra
                         else ["--health-load-per-cpu", "0"]),
                       *self.extra]),
            stdout=subprocess.PIPE, stderr=log, text=True,
            env=dict(os.environ, HOME=self.tmp.name, **self.serve_env))  # discovery file: ours
        log.close()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError("kiln serve exited before serving: " + self.serve_errors())
        event = json.loads(line)
        assert event["event"] == "serving", event
        assert event["address"] == self.url, event
        if event["token_file"]:
            with open(event["token_file"]) as f:
                self.token = f.read().strip()
        if wait_nodes:
            wait_until(lambda: len([n for n in self.node_list() if n["state"] != "down"]) >= self.nodes,
                       30, f"{self.nodes} nodes to register")
        return self

    def serve_errors(self):
        path = os.path.join(self.tmp.name, "serve.err")
        return open(path).read() if os.path.exists(path) else ""

    def kill9(self):
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.proc.stdout.close()

    def settings(self):
        db = os.path.join(self.state, "kiln.db")
        if not os.path.exists(db):
            return {}
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return dict(con.execute("SELECT key, value FROM settings").fetchall())
        finally:
            con.close()

    def daemon_pids(self):
        out = []
        for key, value in self.settings().items():
            if key == "store_pid" or key.startswith("agent_pid/"):
                out.append(int(value))
        return out

    def close(self):
        try:
            self.stop()
        finally:
            # Whatever is left (a coordinator killed with SIGKILL leaves its daemons): the agents
            # first (SIGTERM stops their ranks), then SIGKILL for anything still there.
            pids = [p for p in self.daemon_pids() if pid_alive(p) and is_kiln(p)]
            for p in pids:
                os.kill(p, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
                time.sleep(0.1)
            for p in pids:
                if pid_alive(p):
                    os.kill(p, signal.SIGKILL)
            for p in self.rank_pids_all():
                if pid_alive(p) and is_kiln(p):
                    os.killpg(p, signal.SIGKILL)
            self.tmp.cleanup()

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc):
        self.close()

    # --- clients
    def env(self, token=None):
        env = dict(os.environ)
        env["KILN_SERVER"] = self.url
        env["KILN_TOKEN"] = token if token is not None else self.token
        env["HOME"] = self.tmp.name  # no discovery file of another cluster
        if self.ca_cert:
            env["KILN_CA_CERT"] = self.ca_cert
        return env

    def kiln(self, *args, token=None, timeout=60, cwd=None):
        return subprocess.run(self.wrap([KILN_BIN, *args]), capture_output=True, text=True,
                              timeout=timeout, env=self.env(token), cwd=cwd or SOURCE_DIR)

    def kiln_json(self, *args, **kw):
        r = self.kiln(*args, "--json", **kw)
        if r.returncode != 0:
            raise AssertionError(f"kiln {' '.join(args)} failed ({r.returncode}): {r.stderr}")
        return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]

    def node_list(self):
        r = self.kiln("nodes", "--json")
        if r.returncode != 0:
            return []
        return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]

    def submit(self, spec_path, cwd=None):
        out = self.kiln_json("submit", spec_path, cwd=cwd)
        return out[0]["id"]

    def status(self, job):
        return self.kiln_json("status", job)[0]

    def events(self, job):
        return self.kiln_json("events", job)

    def wait_state(self, job, states, timeout_s):
        states = {states} if isinstance(states, str) else set(states)
        try:
            return wait_until(
                lambda: self.status(job) if self.status(job)["state"] in states else None,
                timeout_s, f"job {job} to reach {sorted(states)}")
        except AssertionError as e:
            # What the job was doing instead: a timeout under load reads differently from a
            # job stuck on a refusal.
            raise AssertionError(f"{e}; its status: {self.status(job)}; its events: "
                                 f"{self.events(job)[-10:]}") from None

    def logs(self, job, rank, attempt=None):
        args = ["logs", job, "--rank", str(rank)]
        if attempt is not None:
            args += ["--attempt", str(attempt)]
        return self.kiln_json(*args)

    # --- the ranks, as their agents started them
    def agent_logs(self):
        # The local agents' directories, or under Slurm those of the agents in the allocations.
        root = os.path.join(self.state, "slurm" if self.executor == "slurm" else "", "nodes")
        out = []
        if not os.path.isdir(root):
            return out
        for node in sorted(os.listdir(root)):
            path = os.path.join(root, node, "agent.log")
            if not os.path.exists(path):
                continue
            with open(path, errors="replace") as f:
                for line in f:
                    if line.startswith("{"):
                        try:
                            record = json.loads(line)
                        except ValueError:
                            continue
                        record["_node"] = node
                        out.append(record)
        return out

    def rank_pid(self, job, attempt, rank):
        """(pid, node) of a started rank, or None."""
        for r in self.agent_logs():
            if (r.get("msg") == "rank started" and r.get("job") == job
                    and r.get("attempt") == attempt and r.get("rank") == rank):
                return r["pid"], r["_node"]
        return None

    def rank_pids_all(self):
        return [r["pid"] for r in self.agent_logs() if r.get("msg") == "rank started"]


def start_netns_agent(hosts, cluster, i, extra=(), kiln=None):
    """`kiln agent --join` in fake host i's namespace (fakehosts.py), node name h<i>, its ranks
    advertising the address of the namespace's veth0 for TCP and its endpoint (rank logs, facts,
    probes) on that address. Returns the Popen; the caller stops it."""
    work = os.path.join(cluster.state, "nodes", f"h{i}")
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "agent.out"), "a") as out:
        return hosts.popen(
            i, [kiln or KILN_BIN, "--log-file", os.path.join(work, "agent.log"), "agent",
                "--join", cluster.url, "--node-name", f"h{i}", "--rank-address", "veth0",
                "--logs-bind", hosts.addr(i), "--work-dir", work,
                "--node-token-file", os.path.join(cluster.state, "node.token"), *extra],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
