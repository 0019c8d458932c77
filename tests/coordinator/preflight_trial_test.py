"""The trial run of `kiln preflight --job JOB.yaml --level full` (issue 15): three `kiln agent
--join` processes; a3 runs in a mount namespace of its own where the training data directory is
another, valid one (a corrupt or stale copy of the data on one node: nothing the stack check sees).
The lock records the job's trial on this machine (`kiln lock --trial`).

- Against the lock: a1 and a2 match its loss; a3 is named with the lock's loss and its own, and
  cordoned; the trial's figures are in the answer.
- Another computation than the lock's (other steps): the nodes are held against each other and
  a3 is still the odd one out.
- A job that asks `preflight: full` waits for passes at full, which the gate then runs.
- The trial runs as the team's Unix user, entering the job's directory with that user's rights:
  a directory it cannot enter fails the trial (the job's finding, nobody cordoned).
- A job whose trial runs nowhere (its config is missing) fails the preflight as the job's
  finding, and no node is cordoned for it; a job that is not `kiln train` is refused, named.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_cluster import Cluster  # noqa: E402
from kiln_test import KILN_BIN, SOURCE_DIR, skip_unless_ci, stop_processes, wait_until  # noqa: E402

TRAIN = os.path.join(SOURCE_DIR, "data", "sotu", "train")
VAL = os.path.join(SOURCE_DIR, "data", "sotu", "val")
# A small GPT-2 on the real corpus: a trial of a few steps takes about a second.
CONFIG = f"""model: {{n_layer: 1, n_head: 2, n_embd: 64, block_size: 64, vocab_size: 50257}}
data: {{train: {TRAIN}, val: {VAL}}}
train: {{batch: 2, seq: 64, grad_accum: 1, max_steps: 100, lr: 0.001, min_lr: 0.0001,
        warmup_steps: 2, weight_decay: 0.1, beta1: 0.9, beta2: 0.95, eps: 1.0e-8, grad_clip: 1.0,
        val_every: 50, val_batches: 2, seed: 1337, threads: 2}}
"""
JOB = """name: {name}
command: [kiln, train, {config}, --threads, "1", --max-steps, "100", --json]
nodes: 2
"""


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "OPENBLAS_", "KILN_"))}


class TrialRunTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-trial-")
        self.addCleanup(self.tmp.cleanup)
        self.job_dir = os.path.join(self.tmp.name, "job")
        os.makedirs(self.job_dir)
        with open(os.path.join(self.job_dir, "model.yaml"), "w") as f:
            f.write(CONFIG)
        self.agents = {}
        self.addCleanup(lambda: stop_processes(list(self.agents.values())))

    def job(self, name, config="model.yaml"):
        path = os.path.join(self.job_dir, f"{name}.yaml")
        with open(path, "w") as f:
            f.write(JOB.format(name=name, config=config))
        return path

    def start_agent(self, cluster, name, other_data=False, token_file=None):
        work = os.path.join(self.tmp.name, name)
        os.makedirs(work)
        argv = [KILN_BIN, "--log-file", os.path.join(work, "agent.log"), "agent", "--join",
                cluster.url, "--node-name", name, "--rank-address", "127.0.0.1", "--work-dir",
                work, "--node-token-file",
                token_file or os.path.join(cluster.state, "node.token")]
        if other_data:
            # In a mount namespace of its own, the training data directory is the validation
            # one: valid shards, other tokens. The mount is gone with the namespace.
            argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                    'mount --bind "$0" "$1" && shift && exec "$@"', VAL, TRAIN, *argv]
        with open(os.path.join(work, "agent.out"), "w") as out:
            self.agents[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, env=clean_env())

    def preflight(self, cluster, *args):
        r = cluster.kiln("preflight", *args, "--json", timeout=600, cwd=self.job_dir)
        lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
        return (r, [x for x in lines if "path" in x],
                {x["node"]: x for x in lines if x.get("trial")},
                {x["node"]: x for x in lines if "verdict" in x}, lines[-1] if lines else {})

    def test_the_node_with_other_data_is_named_by_its_trial(self):
        facts = os.path.join(self.tmp.name, "facts.json")
        with open(facts, "w") as f:
            subprocess.run([KILN_BIN, "facts", "--json"], stdout=f, env=clean_env(), check=True,
                           timeout=60)
        lock = os.path.join(self.tmp.name, "kiln.lock")
        job = self.job("trial")
        r = subprocess.run([KILN_BIN, "lock", "--facts", facts, "--node", "a1", "--trial", job,
                            "--trial-steps", "3", "-o", lock], capture_output=True, text=True,
                           timeout=300, cwd=self.job_dir, env=clean_env())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"trial of 3 steps: loss [0-9.]+, [0-9.e+]+ tokens/s")
        with open(lock) as f:
            text = f.read()
        self.assertIn("trial:\n", text)
        self.assertRegex(text, r'signature: "steps 3; --threads 1; config sha256 [0-9a-f]{64}"')
        expected_loss = float(text.split("\n  loss: ")[1].split("\n")[0])
        # Three trials share this machine's cores at once, where the lock's ran alone: an
        # operator widens the throughput floor the same way for a host shared with other work.
        with open(lock, "w") as f:
            f.write(text.replace("tokens_per_s_fraction: 0.5", "tokens_per_s_fraction: 0.1"))

        cluster = Cluster(nodes=3, local_nodes=0, extra=["--lock", lock])
        self.addCleanup(cluster.close)
        cluster.start(wait_nodes=False)
        for name in ("a1", "a2"):
            self.start_agent(cluster, name)
        self.start_agent(cluster, "a3", other_data=True)
        try:
            wait_until(lambda: len([n for n in cluster.node_list()
                                    if (n.get("preflight") or {}).get("passed")]) == 3,
                       60, "three agents to join and pass the gate's quick check")
        except AssertionError:
            with open(os.path.join(self.tmp.name, "a3", "agent.out")) as f:
                raise AssertionError(f"nodes: {cluster.node_list()}\na3: {f.read()[-2000:]}")

        # A job that asks `preflight: full` is not placed on quick passes: the gate checks the
        # idle nodes at full, then places it.
        spec = os.path.join(self.job_dir, "asks-full.yaml")
        with open(spec, "w") as f:
            f.write('name: asks-full\ncommand: [sleep, "600"]\nnodes: 2\npreflight: full\n')
        full_job = cluster.submit(spec, cwd=self.job_dir)
        placed = cluster.wait_state(full_job, "running", 120)
        nodes = {n["name"]: n for n in cluster.node_list()}
        for name in placed["nodes"]:
            self.assertEqual(nodes[name]["preflight"]["level"], "full", nodes[name])
        self.assertRegex(cluster.kiln("nodes").stdout, r"pass full")
        cluster.kiln("cancel", full_job)
        cluster.wait_state(full_job, "cancelled", 60)

        # Against the lock.
        r, findings, trial, verdicts, last = self.preflight(
            cluster, "--job", job, "--level", "full", "--trial-steps", "3", "--trial-nodes", "3")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertEqual({n: v["verdict"] for n, v in verdicts.items()},
                         {"a1": "pass", "a2": "pass", "a3": "fail"}, findings)
        self.assertEqual(sorted(trial), ["a1", "a2", "a3"])
        for name in ("a1", "a2"):
            self.assertTrue(trial[name]["ran"], trial[name])
            self.assertAlmostEqual(trial[name]["loss"], expected_loss, delta=1e-4 * expected_loss)
            self.assertGreater(trial[name]["tokens_per_s"], 0)
        self.assertEqual(last["trial_reference"], "lock")
        self.assertGreater(last["seconds"]["trial"], 0)
        off = [f for f in findings if f["node"] == "a3"]
        self.assertEqual(len(off), 1, findings)
        print(f"3-step loss: lock {expected_loss!r}, a1 {trial['a1']['loss']!r}, "
              f"a2 {trial['a2']['loss']!r}, a3 (other data) {trial['a3']['loss']!r}",
              file=sys.stderr)
        self.assertEqual((off[0]["check"], off[0]["path"], off[0]["against"]),
                         ("trial", "trial.loss", "lock"))
        self.assertTrue(off[0]["expected"].endswith(" within 0.01%"), off[0])
        self.assertNotAlmostEqual(float(off[0]["found"]), expected_loss, delta=1e-4 * expected_loss)
        nodes = {n["name"]: n for n in cluster.node_list()}
        self.assertEqual(nodes["a3"]["state"], "cordoned")
        self.assertIn("preflight full: trial trial.loss: expected", nodes["a3"]["reason"])
        self.assertEqual((nodes["a1"]["state"], nodes["a2"]["state"]), ("ready", "ready"))
        # The table says it too, for a person.
        r = cluster.kiln("preflight", "--job", job, "--level", "full", "--trial-steps", "3",
                         "--trial-nodes", "3", timeout=600, cwd=self.job_dir)
        self.assertRegex(r.stdout, r"a3\s+FAIL\s+trial\s+trial.loss: expected")
        self.assertRegex(r.stdout, r"trial: a1 loss [0-9.]+, [0-9.e+]+ tokens/s; a2 loss .*"
                                   r"\(held against: lock\)")

        # Another computation than the lock's: the nodes against each other.
        r, findings, trial, verdicts, last = self.preflight(
            cluster, "--job", job, "--level", "full", "--trial-steps", "4", "--trial-nodes", "3")
        self.assertIn("another computation", last["trial_reference"])
        off = [f for f in findings if f["node"] == "a3" and f["check"] == "trial"]
        self.assertEqual([(f["path"], f["against"]) for f in off],
                         [("trial.loss", "trial majority")], trial)
        self.assertEqual(verdicts["a1"]["verdict"], "pass", findings)

        # A config no node has: the job's finding; no node is cordoned for it.
        r, findings, trial, verdicts, last = self.preflight(
            cluster, "--job", self.job("missing", config="no-such.yaml"), "--level", "full",
            "--trial-steps", "2", "--trial-nodes", "2")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        job_findings = [f for f in findings if f["node"] == ""]
        self.assertEqual(len(job_findings), 1, findings)
        self.assertEqual(job_findings[0]["path"], "trial.run")
        self.assertIn("every trial node failed", job_findings[0]["found"])
        self.assertIn("no-such.yaml", job_findings[0]["found"])
        nodes = {n["name"]: n for n in cluster.node_list()}
        self.assertEqual((nodes["a1"]["state"], nodes["a2"]["state"]), ("ready", "ready"))

        # A job that is not Kiln's trainer has no trial: refused, naming its command.
        spec = os.path.join(self.job_dir, "sleep.yaml")
        with open(spec, "w") as f:
            f.write('name: sleep\ncommand: [sleep, "600"]\nnodes: 1\n')
        r = cluster.kiln("preflight", "--job", spec, "--level", "full", timeout=60,
                         cwd=self.job_dir)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("'sleep 600' is not `kiln train CONFIG ...`", r.stderr)

    def test_the_trial_runs_with_the_rights_of_the_teams_user(self):
        if os.geteuid() != 0:
            skip_unless_ci(self, "running a trial as another Unix user needs root")
        sha = lambda t: hashlib.sha256(t.encode()).hexdigest()  # noqa: E731
        auth = os.path.join(self.tmp.name, "auth.yaml")
        with open(auth, "w") as f:
            f.write(f"tokens:\n  ops: {{team: ops, admin: true, sha256: {sha('ops-token')}}}\n"
                    f"node_token_sha256: {sha('node-token')}\n"
                    "team_users:\n  ml: nobody\n")
        node_token = os.path.join(self.tmp.name, "node.token")
        with open(node_token, "w") as f:
            f.write("node-token\n")
        cluster = Cluster(nodes=2, local_nodes=0, token="ops-token",
                          extra=["--auth-file", auth, "--node-token-file", node_token])
        self.addCleanup(cluster.close)
        cluster.start(wait_nodes=False)
        for name in ("a1", "a2"):
            self.start_agent(cluster, name, token_file=node_token)
        wait_until(lambda: len([n for n in cluster.node_list()
                                if (n.get("preflight") or {}).get("passed")]) == 2,
                   60, "two agents to join and pass the gate's quick check")
        job = self.job("as-nobody")
        args = ("--job", job, "--level", "full", "--trial-steps", "2", "--team", "ml")
        # The job's directory is under a private (0700) temporary directory: nobody cannot enter
        # it, and so cannot the trial, though the agent (root) could.
        r, findings, trial, verdicts, last = self.preflight(cluster, *args)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        job_findings = [f for f in findings if f["node"] == ""]
        self.assertEqual([f["path"] for f in job_findings], ["trial.run"], findings)
        self.assertIn("Permission denied", job_findings[0]["found"])
        self.assertEqual({n["state"] for n in cluster.node_list()}, {"ready"})
        # Opened to others, it runs there as nobody and passes.
        os.chmod(self.tmp.name, 0o755)
        r, findings, trial, verdicts, last = self.preflight(cluster, *args)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(sorted(trial), ["a1", "a2"])
        self.assertTrue(all(t["ran"] for t in trial.values()), trial)
        self.assertEqual(last["trial_user"], "nobody")


if __name__ == "__main__":
    unittest.main()
