"""`kiln preflight --level full` on four fake hosts with real links (issue 15): the coordinator
in a controller namespace, one `kiln agent --join` in each of four host namespaces on a private
bridge (tests/lib/fakehosts.py). What h2 sends to h3 goes through tbf at 200 mbit/s; every other
link is a veth at memory speed.

- The full check's link matrix (kiln link-check on every agent, one rank per node, TCP only)
  names that link with both ends: h2 and h3 fail with `links.h2~h3.gbps`, h1 and h4 pass, and
  the operator check passes everywhere.
- The gate cordons h2 and h3 with the finding; with the limit gone, the next full check passes
  and lifts the cordon.
- The quick and full timings are printed for docs/PERFORMANCE.md.
"""
import json
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, HERE)
from fakehosts import CONTROLLER, FakeHosts  # noqa: E402
from kiln_cluster import Cluster, start_netns_agent  # noqa: E402
from kiln_test import stop_processes, wait_until  # noqa: E402
from netns_agents_test import fake_hosts_available  # noqa: E402

HOSTS = 4
SLOW = (2, 3)  # what h2 sends to h3 is rate-limited
RATE = "200mbit"


class PreflightLinksTest(unittest.TestCase):
    def setUp(self):
        if not fake_hosts_available(self):
            return
        self.hosts = FakeHosts("kpl", "10.77.57", HOSTS)
        self.hosts.up()
        self.addCleanup(self.hosts.down)  # kills whatever still runs in the namespaces
        self.agents = []
        self.addCleanup(lambda: stop_processes(list(self.agents)))

    def preflight(self, cluster, level):
        t0 = time.monotonic()
        r = cluster.kiln("preflight", "--level", level, "--json", timeout=180)
        took = time.monotonic() - t0
        lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
        findings = [x for x in lines if "path" in x]
        verdicts = {x["node"]: x["verdict"] for x in lines if "verdict" in x}
        self.links = {(x["a"], x["b"]): x for x in lines if "gbps" in x}
        return r, findings, verdicts, took

    def node(self, cluster, name):
        return next(n for n in cluster.node_list() if n["name"] == name)

    def test_a_rate_limited_link_is_named_with_both_ends_and_the_others_pass(self):
        ctl = self.hosts.addr(CONTROLLER)
        cluster = Cluster(nodes=HOSTS, local_nodes=0, bind=ctl,
                          wrap=lambda argv: self.hosts.command(CONTROLLER, argv))
        cluster.start(wait_nodes=False)
        self.addCleanup(cluster.close)
        for i in range(1, HOSTS + 1):
            self.agents.append(start_netns_agent(self.hosts, cluster, i))
        wait_until(lambda: len([n for n in cluster.node_list()
                                if (n.get("preflight") or {}).get("passed")]) == HOSTS,
                   60, "four agents to join and pass the gate's quick check")

        r, findings, verdicts, quick_s = self.preflight(cluster, "quick")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r, findings, verdicts, full_s = self.preflight(cluster, "full")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        print(f"\n4 fake hosts, no limit: quick {quick_s:.2f} s, full {full_s:.2f} s", flush=True)

        self.hosts.rate_to(*SLOW, RATE)
        r, findings, verdicts, full_s = self.preflight(cluster, "full")
        print(f"h2 -> h3 at {RATE}: full {full_s:.2f} s\n" + r.stdout, flush=True)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertEqual(verdicts, {"h1": "pass", "h2": "fail", "h3": "fail", "h4": "pass"})
        self.assertEqual(sorted((f["node"], f["check"], f["path"]) for f in findings),
                         [("h2", "links", "links.h2~h3.gbps"), ("h3", "links", "links.h2~h3.gbps")])
        slow = float(findings[0]["found"])
        self.assertLess(slow, 0.25, findings)  # 200 mbit/s is 0.2 Gbit/s
        # The matrix: every node met at least two peers; h2~h3 is the measured slow pair.
        self.assertGreaterEqual(len(self.links), 4, self.links)
        self.assertLess(self.links[("h2", "h3")]["gbps"], 0.25, self.links)
        for name in ("h1", "h2", "h3", "h4"):
            self.assertGreaterEqual(len({p for p in self.links if name in p}), 2, (name, self.links))
        # The gate cordons both ends with the finding; the others stay ready.
        for name in ("h2", "h3"):
            n = self.node(cluster, name)
            self.assertEqual(n["state"], "cordoned", n)
            self.assertTrue(n["reason"].startswith("preflight full: links links.h2~h3.gbps"), n)
            self.assertFalse(n["preflight"]["passed"], n)
        for name in ("h1", "h4"):
            self.assertEqual(self.node(cluster, name)["state"], "ready")
        table = cluster.kiln("nodes").stdout
        self.assertRegex(table, r"h2\s+cordoned\s+.*FAIL full")

        # The limit gone, a full check passes and lifts preflight's cordon.
        self.hosts.norate(SLOW[0])
        r, findings, verdicts, _ = self.preflight(cluster, "full")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for name in ("h2", "h3"):
            self.assertEqual(self.node(cluster, name)["state"], "ready")


if __name__ == "__main__":
    unittest.main()
