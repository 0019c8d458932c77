"""`kiln preflight` and the coordinator's preflight gate (issue 15): five `kiln agent --join`
processes, two consistent, one with another OMP_NUM_THREADS, one with a low open-file limit and
one from another Kiln build (kiln-other-build: the same code with another version string). Their
facts are read by the coordinator from the agents themselves (GET /v1/facts, node token), checked
across the nodes and against the lock `kiln serve --lock` was given, and their health.

- Each odd agent is named with the expected and the found value.
- The gate cordons the three with the finding; a job of two nodes runs on the two consistent
  ones, and one of three waits instead of running across an inconsistent node.
- An unreachable agent and an unknown node are named, not a crash.
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_cluster import Cluster  # noqa: E402
from kiln_test import KILN_BIN, stop_processes, wait_until  # noqa: E402

# What the environment of each agent adds: a3's stack is the odd one out; a4 runs with an
# open-file limit (soft and hard) below preflight's threshold; a5 runs another build.
AGENTS = {"a1": {}, "a2": {}, "a3": {"OMP_NUM_THREADS": "3"}, "a4": {}, "a5": {}}
LOW_NOFILE = {"a4": 1024}
OTHER_BUILD = os.path.join(os.path.dirname(KILN_BIN), "kiln-other-build")
BINARY = {"a5": OTHER_BUILD}
SPEC = """name: {name}
command: [sleep, "600"]
nodes: {nodes}
"""


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
            [BINARY.get(name, KILN_BIN), "--log-file", os.path.join(work, "agent.log"), "agent",
             "--join",
             cluster.url, "--node-name", name, "--rank-address", "127.0.0.1", "--work-dir", work,
             "--node-token-file", os.path.join(cluster.state, "node.token")],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(clean_env(), **AGENTS[name]),
            preexec_fn=(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (LOW_NOFILE[name],) * 2))
            if name in LOW_NOFILE else None)
        out.close()

    def submit(self, cluster, name, nodes):
        spec = os.path.join(self.tmp.name, f"{name}.yaml")
        with open(spec, "w") as f:
            f.write(SPEC.format(name=name, nodes=nodes))
        return cluster.submit(spec)

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

        self.assertTrue(os.access(OTHER_BUILD, os.X_OK), f"{OTHER_BUILD}: build it (ninja)")
        cluster = Cluster(nodes=5, local_nodes=0, extra=["--lock", lock])
        self.addCleanup(cluster.close)
        cluster.start(wait_nodes=False)
        for name in AGENTS:
            self.start_agent(cluster, name)
        # The gate checks every agent as it joins: two pass, three are cordoned.
        wait_until(lambda: len([n for n in cluster.node_list() if n.get("preflight")]) == 5,
                   30, "five agents to join and be checked by the gate")

        r, findings, verdicts = self.preflight(cluster)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual({n: v["verdict"] for n, v in verdicts.items()},
                         {"a1": "pass", "a2": "pass", "a3": "fail", "a4": "fail", "a5": "fail"})
        got = sorted((f["node"], f["check"], f["path"], f["expected"], f["found"], f["against"])
                     for f in findings if f["node"] != "a5")
        self.assertEqual(got, [
            ("a3", "stack", "environment.OMP_NUM_THREADS", "(unset)", "3", "lock"),
            ("a4", "health", "kernel_params.open_files_soft", ">= 4096", "1024", "threshold")])
        other = {f["path"]: f for f in findings if f["node"] == "a5"}
        version = subprocess.run([KILN_BIN, "version"], capture_output=True, text=True,
                                 check=True).stdout.split()[1]
        self.assertEqual(other["kiln.version"]["expected"], version)
        self.assertEqual(other["kiln.version"]["found"], version + "+other-build")
        self.assertEqual(other["kiln.version"]["against"], "lock")
        self.assertIn("kiln.build_id", other)
        self.assertGreater(verdicts["a1"]["checked"], 20)

        # The gate: the odd three are cordoned with their findings, `kiln nodes` says so.
        nodes = {n["name"]: n for n in cluster.node_list()}
        self.assertEqual({n: v["state"] for n, v in nodes.items()},
                         {"a1": "ready", "a2": "ready", "a3": "cordoned", "a4": "cordoned",
                          "a5": "cordoned"})
        self.assertIn("environment.OMP_NUM_THREADS: expected (unset), found 3", nodes["a3"]["reason"])
        self.assertIn("open_files_soft: expected >= 4096, found 1024", nodes["a4"]["reason"])
        self.assertRegex(nodes["a5"]["reason"],
                         r"^preflight quick: stack kiln.build_id: expected [0-9a-f]+, found [0-9a-f]+ "
                         r"\(lock\)")
        self.assertRegex(cluster.kiln("nodes").stdout, r"a1\s+ready\s+.*pass quick")
        # A job of two nodes runs on the consistent ones; one of three is not placed across an
        # inconsistent node: it waits, saying why.
        two = self.submit(cluster, "two", 2)
        self.assertEqual(sorted(cluster.wait_state(two, "running", 30)["nodes"]), ["a1", "a2"])
        three = self.submit(cluster, "three", 3)
        time.sleep(2)
        st = cluster.status(three)
        self.assertEqual(st["state"], "queued", st)
        self.assertIn("cordoned", st["waiting"], st)
        cluster.kiln("cancel", two)
        cluster.kiln("cancel", three)

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

    def test_the_health_thresholds_are_the_coordinators_and_cover_the_agents_directories(self):
        # Free space no disk has; the load check on, with a bound no host reaches.
        cluster = Cluster(nodes=1, local_nodes=0,
                          extra=["--health-disk-free-bytes", str(10**18),
                                 "--health-load-per-cpu", "1000000"])
        self.addCleanup(cluster.close)
        cluster.start(wait_nodes=False)
        work = os.path.join(self.tmp.name, "a1")
        os.makedirs(work)
        self.agents["a1"] = subprocess.Popen(
            [KILN_BIN, "--log-file", os.path.join(work, "agent.log"), "agent", "--join",
             cluster.url, "--node-name", "a1", "--rank-address", "127.0.0.1", "--work-dir", work,
             "--check-dir", "/tmp", "--node-token-file",
             os.path.join(cluster.state, "node.token")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            env=clean_env())
        wait_until(lambda: [n for n in cluster.node_list() if n.get("preflight")], 30,
                   "a1 to join and be checked")
        r, findings, verdicts = self.preflight(cluster)
        self.assertEqual(r.returncode, 1, r.stderr)
        got = {f["path"]: f for f in findings}
        self.assertEqual(sorted(got), sorted([f"disks.{work}.free_bytes", "disks./tmp.free_bytes"]),
                         findings)
        for f in got.values():
            self.assertEqual((f["check"], f["expected"], f["against"]),
                             ("health", f">= {10**18}", "threshold"))
            self.assertGreater(int(f["found"]), 0)
        # The gate cordoned it with the first finding.
        node = cluster.node_list()[0]
        self.assertEqual(node["state"], "cordoned")
        self.assertIn("free_bytes: expected >= 1000000000000000000", node["reason"])


if __name__ == "__main__":
    unittest.main()
