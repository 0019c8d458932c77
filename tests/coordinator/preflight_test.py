"""`kiln preflight` through the coordinator (issue 15, the stack check): three `kiln agent
--join` processes started with different environments, their facts read by the coordinator from
the agents themselves (GET /v1/facts, node token), checked across the nodes and against the lock
`kiln serve --lock` was given, and their health (an agent with a low open-file limit).
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_cluster import Cluster  # noqa: E402
from kiln_test import KILN_BIN, stop_processes, wait_until  # noqa: E402

# What the environment of each agent adds: a3's stack is the odd one out; a4 runs with an
# open-file limit (soft and hard) below preflight's threshold.
AGENTS = {"a1": {}, "a2": {}, "a3": {"OMP_NUM_THREADS": "3"}, "a4": {}}
LOW_NOFILE = {"a4": 1024}


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "OPENBLAS_", "KILN_"))}


class PreflightThroughTheCoordinatorTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-preflight-")
        self.addCleanup(self.tmp.cleanup)
        self.agents = {}
        self.addCleanup(lambda: stop_processes(list(self.agents.values())))

    def start_agent(self, cluster, name):
        work = os.path.join(self.tmp.name, name)
        os.makedirs(work)
        out = open(os.path.join(work, "agent.out"), "w")
        self.agents[name] = subprocess.Popen(
            [KILN_BIN, "--log-file", os.path.join(work, "agent.log"), "agent", "--join",
             cluster.url, "--node-name", name, "--rank-address", "127.0.0.1", "--work-dir", work,
             "--node-token-file", os.path.join(cluster.state, "node.token")],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(clean_env(), **AGENTS[name]),
            preexec_fn=(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (LOW_NOFILE[name],) * 2))
            if name in LOW_NOFILE else None)
        out.close()

    def preflight(self, cluster, *args):
        r = cluster.kiln("preflight", *args, "--json", timeout=120)
        lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
        return r, [x for x in lines if "path" in x], {x["node"]: x for x in lines if "verdict" in x}

    def test_the_odd_agent_is_named_against_the_others_and_the_lock(self):
        # The lock: this machine's stack in the environment of a1 and a2.
        facts = os.path.join(self.tmp.name, "facts.json")
        with open(facts, "w") as f:
            subprocess.run([KILN_BIN, "facts", "--json"], stdout=f, env=clean_env(), check=True,
                           timeout=60)  # the lock holds no health figure: any limit will do
        lock = os.path.join(self.tmp.name, "kiln.lock")
        r = subprocess.run([KILN_BIN, "lock", "--facts", facts, "--node", "a1", "-o", lock],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)

        cluster = Cluster(nodes=4, local_nodes=0, extra=["--lock", lock])
        self.addCleanup(cluster.close)
        cluster.start(wait_nodes=False)
        for name in AGENTS:
            self.start_agent(cluster, name)
        wait_until(lambda: len([n for n in cluster.node_list() if n["state"] == "ready"]) == 4,
                   30, "four agents to join")

        r, findings, verdicts = self.preflight(cluster)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual({n: v["verdict"] for n, v in verdicts.items()},
                         {"a1": "pass", "a2": "pass", "a3": "fail", "a4": "fail"})
        got = sorted((f["node"], f["check"], f["path"], f["expected"], f["found"], f["against"])
                     for f in findings)
        self.assertEqual(got, [
            ("a3", "stack", "environment.OMP_NUM_THREADS", "(unset)", "3", "lock"),
            ("a4", "health", "kernel_params.open_files_soft", ">= 4096", "1024", "threshold")])
        self.assertGreater(verdicts["a1"]["checked"], 20)

        # The consistent nodes alone pass; the table names the odd one.
        r, _, verdicts = self.preflight(cluster, "--nodes", "a1,a2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(verdicts), ["a1", "a2"])
        r = cluster.kiln("preflight")
        self.assertIn("a3    FAIL         stack   environment.OMP_NUM_THREADS: expected (unset) "
                      "(lock), found 3", r.stdout)

        # An agent that is gone: unreachable, named, not a crash.
        self.agents["a2"].kill()
        self.agents["a2"].wait()
        r, _, verdicts = self.preflight(cluster, "--nodes", "a1,a2")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(verdicts["a2"]["verdict"], "unreachable")
        self.assertIn("a2", verdicts["a2"]["error"])
        self.assertEqual(verdicts["a1"]["verdict"], "pass")

        # A node the coordinator does not know: a clear error, exit 2.
        r = cluster.kiln("preflight", "--nodes", "nosuch")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no node nosuch", r.stderr)


if __name__ == "__main__":
    unittest.main()
