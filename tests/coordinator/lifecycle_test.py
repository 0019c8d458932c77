"""The storage lifecycle (issue 16) on the embedded cluster: a finished job's checkpoints are
pruned to the newest K at once, `kiln status --cluster` shows what the team's checkpoints take,
and once the job has been finished longer than --retain-days its checkpoints, curves and rank
logs are gone, with a "cleaned" event saying how much was freed. (--retain-days 0.0005 is 43 s:
the checks before the cleaning have that long, on a slow machine too.)
"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_cluster import Cluster  # noqa: E402
from kiln_test import SOURCE_DIR, wait_until  # noqa: E402

JOB = """name: lifecycle
command: [kiln, train, configs/tiny.yaml, --threads, "1", --batch, "2", --seq, "64",
          --max-steps, "6", --val-every, "0", --json]
nodes: 1
checkpoint: {{dir: {ckpt}, every: 2}}
"""


def step_dirs(path):
    return sorted(d for d in os.listdir(path) if d.startswith("step_")) if os.path.isdir(path) else []


class LifecycleTest(unittest.TestCase):
    def test_a_finished_jobs_storage_is_pruned_measured_and_then_cleaned(self):
        with tempfile.TemporaryDirectory(prefix="kiln-lifecycle-") as tmp, \
                Cluster(nodes=1, slots=1, extra=["--retain-days", "0.0005",
                                                 "--retain-checkpoints", "1",
                                                 "--lifecycle-interval-s", "1"]) as cluster:
            ckpt = os.path.join(tmp, "ckpt")
            spec = os.path.join(tmp, "job.yaml")
            with open(spec, "w") as f:
                f.write(JOB.format(ckpt=ckpt))
            job = cluster.submit(spec, cwd=SOURCE_DIR)
            cluster.wait_state(job, "succeeded", 120)
            # The trainer kept its newest 3 (steps 2, 4, 6); the lifecycle keeps the newest 1.
            wait_until(lambda: step_dirs(ckpt) == ["step_000000006"], 10, "pruned to the newest")
            cluster_status = cluster.kiln_json("status", "--cluster")[0]
            self.assertGreater(cluster_status["storage_by_team"].get("admin", 0), 0,
                               cluster_status)
            text = cluster.kiln("status", "--cluster").stdout
            self.assertIn("checkpoint storage by team:", text)
            self.assertIn("idle:   1 node(s): local-0", text)
            logs = os.path.join(cluster.state, "nodes", "local-0", job)
            self.assertTrue(os.path.isdir(logs), "the rank's log while kept")

            cleaned = wait_until(lambda: [e for e in cluster.events(job) if e["type"] == "cleaned"],
                                 120, "the cleaned event")
            self.assertGreater(cleaned[0]["bytes_freed"], 0, cleaned)
            self.assertFalse(os.path.exists(ckpt))
            steps = cluster.kiln_json("status", job)[0]
            self.assertEqual(steps["state"], "succeeded", "the record stays")
            wait_until(lambda: not os.path.exists(logs), 90, "the agent removing the rank logs")


if __name__ == "__main__":
    unittest.main()
