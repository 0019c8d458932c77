"""`kiln lock` and `kiln preflight --facts` end to end (issue 15, the stack check): real facts
documents of this machine, taken by `kiln facts --json` under different environments, one of
them edited as a second Kiln build would report itself.
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import KILN_BIN  # noqa: E402


def open_files_as_an_agent():
    """The open-file limit a node's ranks get: the agent raises its soft limit to the hard one
    (Debian's default soft limit, 1024, is below preflight's health threshold)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def kiln(*args, env=None, cwd=None):
    return subprocess.run([KILN_BIN, *args], capture_output=True, text=True, timeout=60,
                          env=env, cwd=cwd, preexec_fn=open_files_as_an_agent)


class PreflightTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-preflight-test-")
        self.addCleanup(self.tmp.cleanup)
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("OMP_", "OPENBLAS_", "KILN_"))}
        base["KILN_BIN"] = KILN_BIN  # per node by nature: not part of the stack
        self.facts = {}
        for node, extra in (("n1", {}), ("n2", {}), ("n3", {}), ("n4", {"OMP_NUM_THREADS": "3"})):
            r = kiln("facts", "--json", env=dict(base, **extra))
            self.assertEqual(r.returncode, 0, r.stderr)
            doc = json.loads(r.stdout)
            if node == "n3":  # another build of Kiln, as it would report itself
                doc["kiln"]["build_id"] = "0" * 40
                doc["kiln"]["version"] = "0.2.0"
            path = os.path.join(self.tmp.name, f"{node}.json")
            with open(path, "w") as f:
                json.dump(doc, f)
            self.facts[node] = path
        with open(self.facts["n1"]) as f:
            self.n1_build = json.load(f)["kiln"]["build_id"]

    def args(self, nodes=("n1", "n2", "n3", "n4")):
        # The facts were taken on this shared test host, whose load is the other tests'.
        out = ["--health-load-per-cpu", "0"]
        for n in nodes:
            out += ["--facts", f"{n}={self.facts[n]}"]
        return out

    def test_the_odd_nodes_are_named_with_expected_and_found(self):
        r = kiln("preflight", *self.args(), "--json")
        self.assertEqual(r.returncode, 1, r.stderr)
        lines = [json.loads(x) for x in r.stdout.splitlines()]
        findings = {(x["node"], x["path"]): x for x in lines if "path" in x}
        self.assertEqual(findings[("n3", "kiln.build_id")]["expected"], self.n1_build)
        self.assertEqual(findings[("n3", "kiln.build_id")]["found"], "0" * 40)
        self.assertEqual(findings[("n3", "kiln.version")]["found"], "0.2.0")
        self.assertEqual(findings[("n4", "environment.OMP_NUM_THREADS")]["expected"], "(unset)")
        self.assertEqual(findings[("n4", "environment.OMP_NUM_THREADS")]["found"], "3")
        self.assertEqual({n for n, _ in findings}, {"n3", "n4"}, findings)
        verdicts = {x["node"]: x["verdict"] for x in lines if "verdict" in x}
        self.assertEqual(verdicts, {"n1": "pass", "n2": "pass", "n3": "fail", "n4": "fail"})
        # The table a person reads.
        r = kiln("preflight", *self.args())
        self.assertEqual(r.returncode, 1)
        self.assertIn("n3    FAIL         stack   kiln.build_id: expected " + self.n1_build,
                      r.stdout)
        # The consistent nodes alone pass.
        self.assertEqual(kiln("preflight", *self.args(("n1", "n2"))).returncode, 0)

    def test_the_lock_decides_and_is_written_on_purpose(self):
        lock = os.path.join(self.tmp.name, "kiln.lock")
        r = kiln("lock", "--facts", self.facts["n3"], "--node", "n3", "-o", lock)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = kiln("lock", "--facts", self.facts["n1"], "-o", lock)
        self.assertEqual(r.returncode, 2)
        self.assertIn("exists", r.stderr)
        # Locked to n3's build: the nodes of the other build fail against the lock, n3 passes,
        # though most nodes agree with each other.
        r = kiln("preflight", *self.args(("n1", "n2", "n3")), "--lock", lock, "--json")
        self.assertEqual(r.returncode, 1, r.stderr)
        lines = [json.loads(x) for x in r.stdout.splitlines()]
        verdicts = {x["node"]: x["verdict"] for x in lines if "verdict" in x}
        self.assertEqual(verdicts, {"n1": "fail", "n2": "fail", "n3": "pass"})
        self.assertTrue(all(x["against"] == "lock" for x in lines if "path" in x), lines)
        r = kiln("lock", "--facts", self.facts["n1"], "-o", lock, "--force")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = kiln("preflight", *self.args(("n1", "n2")), "--lock", lock)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_bad_inputs_name_the_file(self):
        bad = os.path.join(self.tmp.name, "bad.json")
        with open(bad, "w") as f:
            f.write('{"schema": "something/2"}')
        r = kiln("preflight", "--facts", bad)
        self.assertEqual(r.returncode, 2)
        self.assertIn(bad, r.stderr)
        self.assertIn("kiln.facts/1", r.stderr)
        lock = os.path.join(self.tmp.name, "bad.lock")
        with open(lock, "w") as f:
            f.write("schema: kiln.lock/1\nstack:\n  kiln.build_id: [1, 2]\n")
        r = kiln("preflight", "--facts", self.facts["n1"], "--lock", lock)
        self.assertEqual(r.returncode, 2)
        self.assertIn(lock + ":3", r.stderr)
        r = kiln("preflight", "--facts", self.facts["n1"], "--facts", self.facts["n1"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("twice", r.stderr)
        # Through the coordinator the thresholds are kiln serve's: not silently ignored.
        r = kiln("preflight", "--health-open-files", "1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--health-* go with --facts", r.stderr)


if __name__ == "__main__":
    unittest.main()
