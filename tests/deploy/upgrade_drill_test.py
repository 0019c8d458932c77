"""The upgrade and rollback drill of issue 15, with the packages scripts/package builds.

Version A is this build's kiln; version B is kiln-other-build (the same code with another
version string), packaged the same way. Fake hosts share this machine's file system, so "install
on node hN" is `dpkg-deb -x` of the package into that node's own root, and the node's agent runs
that root's /usr/bin/kiln: what a per-node `dpkg -i` would give, without touching this machine's
/usr.

- The package: kiln_<version>_amd64.deb with the binary, the systemd units of kiln serve and
  kiln agent (checked by systemd-analyze where it exists), the deploy files, and a postinst that
  makes the coordinator's user.
- A on the coordinator and three nodes: a job runs. B on h3: the gate cordons h3 naming the
  version and build id it expected and found, `kiln preflight` says the same, and a two-node job
  is placed on h1 and h2. A again on h3 (the rollback): h3 passes and is ready.
- The coordinator upgraded from A to B on the same state keeps every job and every event.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from kiln_cluster import Cluster  # noqa: E402
from kiln_test import KILN_BIN, SOURCE_DIR, stop_processes, wait_until  # noqa: E402

OTHER_BUILD = os.path.join(os.path.dirname(KILN_BIN), "kiln-other-build")
# This build's version ("0.1.0"); kiln-other-build's is VERSION + "+other-build".
VERSION = subprocess.run([KILN_BIN, "version"], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()[1]
SPEC = """name: {name}
command: [sleep, "{seconds}"]
nodes: {nodes}
"""


def package(binary=None):
    argv = [os.path.join(SOURCE_DIR, "scripts", "package"), "--no-build"]
    if binary:
        argv += ["--binary", binary]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=SOURCE_DIR)
    if r.returncode != 0:
        raise AssertionError(f"scripts/package failed: {r.stderr[-3000:]}")
    return r.stdout.strip().splitlines()[-1]


def install(deb, root):
    """The package's files under `root`, as dpkg would place them under /."""
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    subprocess.run(["dpkg-deb", "-x", deb, root], check=True, timeout=120)
    return os.path.join(root, "usr", "bin", "kiln")


class UpgradeDrillTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.deb_a = package()
        cls.deb_b = package(OTHER_BUILD)

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-drill-")
        self.addCleanup(self.tmp.cleanup)
        self.agents = {}
        self.addCleanup(lambda: stop_processes(list(self.agents.values())))

    def test_the_packages_hold_the_binary_the_units_and_their_version(self):
        self.assertTrue(self.deb_a.endswith(f"/kiln_{VERSION}_amd64.deb"), self.deb_a)
        self.assertTrue(self.deb_b.endswith(f"/kiln_{VERSION}+other-build_amd64.deb"), self.deb_b)
        fields = subprocess.run(["dpkg-deb", "-f", self.deb_a, "Package", "Version", "Depends"],
                                capture_output=True, text=True, check=True).stdout
        self.assertIn("Package: kiln", fields)
        self.assertIn(f"Version: {VERSION}\n", fields)
        self.assertIn("libopenblas", fields)  # from dpkg-shlibdeps: what the binary links
        self.assertIn("adduser", fields)  # postinst makes the user kiln
        files = subprocess.run(["dpkg-deb", "-c", self.deb_a], capture_output=True, text=True,
                               check=True).stdout
        for path in ("./usr/bin/kiln", "./usr/lib/systemd/system/kiln-serve.service",
                     "./usr/lib/systemd/system/kiln-agent.service",
                     "./usr/share/kiln/deploy/slurm/kiln-train.sbatch",
                     "./usr/share/kiln/deploy/slurm/kiln-node-check"):
            self.assertIn(path, files)
        control = os.path.join(self.tmp.name, "control")
        subprocess.run(["dpkg-deb", "-e", self.deb_a, control], check=True)
        self.assertTrue(os.path.exists(os.path.join(control, "postrm")))
        with open(os.path.join(control, "postinst")) as f:
            self.assertIn("adduser --system", f.read())
        root = os.path.join(self.tmp.name, "root")
        kiln = install(self.deb_a, root)
        self.assertEqual(subprocess.run([kiln, "version"], capture_output=True, text=True,
                                        check=True).stdout.split()[1], VERSION)
        system_units = "/lib/systemd/system"
        self.assertTrue(shutil.which("systemd-analyze") and os.path.isdir(system_units),
                        "systemd-analyze checks the units: install systemd (scripts/install-deps)")
        # The units the package's units refer to (network-online.target, ...) come from this
        # machine; verify warns about every line of ours it cannot parse.
        subprocess.run(["cp", "-an", system_units + "/.",
                        os.path.join(root, "usr/lib/systemd/system")], check=True)
        for unit in ("kiln-serve.service", "kiln-agent.service"):
            r = subprocess.run(["systemd-analyze", f"--root={root}", "verify",
                                f"/usr/lib/systemd/system/{unit}"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, f"{unit}: {r.stdout}{r.stderr}")
            self.assertNotIn(unit, r.stdout + r.stderr)

    def start_agent(self, cluster, name, kiln):
        work = os.path.join(self.tmp.name, name, "work")
        os.makedirs(work, exist_ok=True)
        out = open(os.path.join(self.tmp.name, name, "agent.out"), "a")
        self.agents[name] = subprocess.Popen(
            [kiln, "--log-file", os.path.join(work, "agent.log"), "agent", "--join", cluster.url,
             "--node-name", name, "--rank-address", "127.0.0.1", "--slots", "2",
             "--work-dir", work, "--node-token-file", os.path.join(cluster.state, "node.token")],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        out.close()

    def stop_agent(self, name):
        stop_processes([self.agents.pop(name)])

    def node(self, cluster, name):
        return next(n for n in cluster.node_list() if n["name"] == name)

    def submit(self, cluster, name, nodes, seconds):
        spec = os.path.join(self.tmp.name, f"{name}.yaml")
        with open(spec, "w") as f:
            f.write(SPEC.format(name=name, nodes=nodes, seconds=seconds))
        return cluster.submit(spec)

    def test_b_on_one_node_is_avoided_and_a_again_rejoins_and_the_coordinator_upgrades(self):
        roots = {n: os.path.join(self.tmp.name, n, "root") for n in ("ctl", "h1", "h2", "h3")}
        bins = {n: install(self.deb_a, root) for n, root in roots.items()}
        cluster = Cluster(nodes=3, local_nodes=0, kiln=bins["ctl"])
        self.addCleanup(cluster.close)
        cluster.start(wait_nodes=False)
        for name in ("h1", "h2", "h3"):
            self.start_agent(cluster, name, bins[name])
        wait_until(lambda: len([n for n in cluster.node_list()
                                if (n.get("preflight") or {}).get("passed")]) == 3,
                   60, "three nodes of version A to pass the gate")
        first = self.submit(cluster, "on-a", 3, 1)
        self.assertEqual(cluster.wait_state(first, "succeeded", 60)["state"], "succeeded")

        # Version B on h3.
        self.stop_agent("h3")
        bins["h3"] = install(self.deb_b, roots["h3"])
        self.start_agent(cluster, "h3", bins["h3"])
        h3 = wait_until(lambda: (lambda n: n if n["state"] == "cordoned" else None)(
            self.node(cluster, "h3")), 30, "the gate to cordon h3 running B")
        self.assertRegex(h3["reason"], r"^preflight quick: stack kiln\.build_id: expected [0-9a-f]+, "
                                       r"found [0-9a-f]+ \(majority\)")
        r = cluster.kiln("preflight", "--json")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn(f'"expected":"{VERSION}","found":"{VERSION}+other-build","node":"h3",'
                      '"path":"kiln.version"', r.stdout)
        second = self.submit(cluster, "avoids-b", 2, 1)
        self.assertEqual(sorted(cluster.wait_state(second, "running", 30)["nodes"]), ["h1", "h2"])
        cluster.wait_state(second, "succeeded", 60)

        # Rollback: A again on h3, which passes and is ready.
        self.stop_agent("h3")
        bins["h3"] = install(self.deb_a, roots["h3"])
        self.start_agent(cluster, "h3", bins["h3"])
        try:
            wait_until(lambda: self.node(cluster, "h3")["state"] == "ready", 30,
                       "h3 back on A to pass and be ready")
        except AssertionError:
            with open(os.path.join(self.tmp.name, "h3", "agent.out")) as f:
                raise AssertionError(f"{self.node(cluster, 'h3')}\n{f.read()[-3000:]}\n"
                                     f"{cluster.kiln('preflight', '--nodes', 'h3').stdout}")
        third = self.submit(cluster, "after-rollback", 3, 1)
        cluster.wait_state(third, "succeeded", 60)

        # The coordinator from A to B on the same state: every job and event is kept.
        before = {job: cluster.events(job) for job in (first, second, third)}
        jobs_before = cluster.kiln_json("status")
        cluster.stop()
        bins["ctl"] = install(self.deb_b, roots["ctl"])
        cluster.kiln_path = bins["ctl"]
        cluster.start(wait_nodes=False)
        self.assertEqual(subprocess.run([bins["ctl"], "version"], capture_output=True, text=True)
                         .stdout.split()[1], VERSION + "+other-build")
        for job, events in before.items():
            self.assertEqual(cluster.events(job), events, job)
        self.assertEqual(cluster.kiln_json("status"), jobs_before)


if __name__ == "__main__":
    unittest.main()
