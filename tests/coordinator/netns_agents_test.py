"""Kiln's own agents on fake hosts with real links (issue 14, item 3): the coordinator runs in a
controller namespace, one `kiln agent --join` runs in each of three host namespaces on a private
bridge (tests/lib/fakehosts.py), and every client (the `kiln` commands of this test) runs in the
controller's namespace. Nothing here reaches an address outside the test's own /24.

- A 2-node job's ranks talk TCP across the veth links: the test reads the established
  connections in the first node's namespace and finds its ranks connected to the second node's
  address (not loopback, not the coordinator's).
- Cutting the second node's link mid-run (its switch port goes down: no reset, as a pulled
  cable) loses that node: the fault names it, and the job restarts from its newest checkpoint on
  the two nodes that remain and finishes.
- Healed, the node's agent is heard again and the node comes back into the cluster.
"""
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, HERE)
from fakehosts import CONTROLLER, FakeHosts  # noqa: E402
from kiln_cluster import Cluster, start_netns_agent  # noqa: E402
from kiln_test import skip_unless_ci, stop_processes, wait_until  # noqa: E402
from recovery_test import CONFIG, TRAIN_DIR, VAL_DIR, step_lines  # noqa: E402

HOSTS = 3
STEPS = 240  # about a minute undisturbed: long enough to cut a link mid-run
NODE_TIMEOUT_MS = 5000
# The spec of tests/coordinator/recovery_test.py with a comm timeout shorter than the node
# timeout's detection plus the restart backoff, so that the surviving ranks give up on their own
# too (either way the culprit is the cut node).
SPEC = """name: {name}
command: [kiln, train, {config}, --peak-gflops, "100", --json, --comm-timeout-ms, "8000"]
nodes: 2
checkpoint: {{dir: {ckpt}, every: 4}}
max_restarts: 3
restart_backoff: 500ms
progress_timeout: 60s
"""


def write_job(tmp, name):
    config = os.path.join(tmp, f"{name}-model.yaml")
    with open(config, "w") as f:
        f.write(CONFIG.format(train=TRAIN_DIR, val=VAL_DIR, steps=STEPS))
    spec = os.path.join(tmp, f"{name}.yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(name=name, config=config, ckpt=os.path.join(tmp, name, "ckpt")))
    return spec


def fake_hosts_available(test):
    if os.geteuid() != 0:
        skip_unless_ci(test, "fake hosts need root (network namespaces)")
        return False
    for tool in ("ip", "nsenter", "ss"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            skip_unless_ci(test, f"{tool} is not installed (scripts/install-deps installs it)")
            return False
    return True


class NetnsAgentsTest(unittest.TestCase):
    def setUp(self):
        if not fake_hosts_available(self):
            return
        if not os.path.isdir(TRAIN_DIR):
            self.fail("no training data: run scripts/fetch-data")
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-netns-agents-")
        self.addCleanup(self.tmp.cleanup)
        self.hosts = FakeHosts("kna", "10.77.56", HOSTS)
        self.hosts.up()
        self.addCleanup(self.hosts.down)  # kills whatever still runs in the namespaces
        self.agents = []
        self.addCleanup(lambda: stop_processes(list(self.agents)))

    def start_agent(self, cluster, i):
        self.agents.append(start_netns_agent(self.hosts, cluster, i,
                                             ["--slots", "2", "--labels", "rack=r1,switch=s1"]))

    def node(self, cluster, name):
        return next((n for n in cluster.node_list() if n["name"] == name), None)

    def test_ranks_talk_tcp_across_veth_and_a_cut_link_restarts_the_job_elsewhere(self):
        ctl = self.hosts.addr(CONTROLLER)
        cluster = Cluster(nodes=HOSTS, local_nodes=0, bind=ctl,
                          wrap=lambda argv: self.hosts.command(CONTROLLER, argv),
                          extra=["--node-timeout-ms", str(NODE_TIMEOUT_MS)])
        cluster.start(wait_nodes=False)
        self.addCleanup(cluster.close)
        for i in range(1, HOSTS + 1):
            self.start_agent(cluster, i)
        wait_until(lambda: len([n for n in cluster.node_list() if n["state"] == "ready"]) == HOSTS,
                   30, f"{HOSTS} agents to join from their namespaces")

        job = cluster.submit(write_job(self.tmp.name, "netns"))
        status = cluster.wait_state(job, "running", 60)
        a, b = status["nodes"]
        ia, ib = int(a[1:]), int(b[1:])

        def reached(step):
            losses, _ = step_lines(cluster, job, 0)
            return max(losses) >= step if losses else False
        wait_until(lambda: reached(9), 180, "attempt 0 to pass step 9 (the checkpoint of step 8)")

        # The ranks' links: from a's namespace, established connections to b's address, from
        # a's own address. The store and the API live on the controller's address, not b's.
        links = [(local, peer) for local, peer in self.hosts.tcp_connections(ia)
                 if peer.startswith(self.hosts.addr(ib) + ":")]
        self.assertTrue(links, self.hosts.tcp_connections(ia))
        for local, _ in links:
            self.assertTrue(local.startswith(self.hosts.addr(ia) + ":"), links)
        print(f"\nrank links {a} -> {b}: {links}", flush=True)

        # Pull b's cable.
        cut_at = time.monotonic()
        self.hosts.cut(ib)
        fault = wait_until(lambda: [e for e in cluster.events(job) if e["type"] == "fault"],
                           60, "the fault event")[0]
        fault_s = time.monotonic() - cut_at
        self.assertEqual(fault["node"], b, fault)
        self.assertIn(fault["cause"], ("node_lost", "rank_exit"), fault)
        print(f"cut {b} -> fault ({fault['cause']}, node {fault['node']}) after {fault_s:.1f} s: "
              f"{fault.get('message', '')}", flush=True)

        final = cluster.wait_state(job, ["succeeded", "failed"], 300)
        self.assertEqual(final["state"], "succeeded", final)
        self.assertEqual(final["attempt"], 1, final)
        self.assertNotIn(b, final["nodes"])
        losses, _ = step_lines(cluster, job, 1)
        self.assertEqual(max(losses), STEPS)
        self.assertGreaterEqual(min(losses) - 1, 8, sorted(losses))  # resumed, not from scratch

        # Healed: the agent is heard again and the node rejoins (it may stay suspect for the
        # cordon window, but it is no longer down).
        self.hosts.heal(ib)
        back = wait_until(lambda: (lambda n: n if n and n["state"] != "down" else None)(
            self.node(cluster, b)), 60, f"{b} to come back after the heal")
        self.assertIn(back["state"], ("ready", "suspect"), back)


if __name__ == "__main__":
    unittest.main()
