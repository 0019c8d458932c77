"""`kiln logs JOB` (issue 16): every rank's log merged in time order with its rank and node, and
the filters (--level, --grep, --since), on a real two-node job that diverges (the trainer's NaN
drill) so that both ranks write errors.
"""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_cluster import Cluster  # noqa: E402
from kiln_test import SOURCE_DIR  # noqa: E402

JOB = """name: logs
command: [kiln, train, configs/tiny.yaml, --threads, "1", --batch, "2", --seq, "64",
          --max-steps, "50", --val-every, "0", --json, --debug-nan-step, "6"]
nodes: 2
max_restarts: 0
"""


class LogsTest(unittest.TestCase):
    def test_every_rank_merged_in_time_order_and_filtered(self):
        with tempfile.TemporaryDirectory(prefix="kiln-logs-") as tmp, \
                Cluster(nodes=2, slots=1) as cluster:
            spec = os.path.join(tmp, "job.yaml")
            with open(spec, "w") as f:
                f.write(JOB)
            job = cluster.submit(spec, cwd=SOURCE_DIR)
            status = cluster.wait_state(job, "failed", 180)
            nodes = status["nodes"]

            records = cluster.kiln_json("logs", job)
            self.assertEqual({r["rank"] for r in records}, {0, 1})
            for r in records:
                self.assertEqual(r["node"], nodes[r["rank"]], r)
            times = [r["ts"] for r in records]
            self.assertEqual(times, sorted(times), "merged in time order")
            steps = [r for r in records if r["line"].startswith('{"step":3,')]
            self.assertEqual({r["rank"] for r in steps}, {0}, "rank 0 writes the step lines")

            errors = cluster.kiln_json("logs", job, "--level", "error")
            self.assertTrue(errors)
            self.assertEqual({r["level"] for r in errors}, {"error"})
            self.assertEqual({r["rank"] for r in errors}, {0, 1}, "both ranks diverged")
            self.assertLess(len(errors), len(records))

            grep = cluster.kiln_json("logs", job, "--grep", r'"step":3,')
            self.assertEqual([(r["rank"], r["line"]) for r in grep],
                             [(0, steps[0]["line"])])

            self.assertEqual(cluster.kiln_json("logs", job, "--since", "2099-01-01T00:00:00Z"), [])
            recent = cluster.kiln_json("logs", job, "--since", "1h")
            self.assertEqual(len(recent), len(records))

            # Merged, each line says when, which rank and where; one rank's are its own lines.
            text = cluster.kiln("logs", job).stdout.splitlines()
            self.assertEqual(len(text), len(records))
            self.assertTrue(all(f" rank {r['rank']} {r['node']} " in line
                                for line, r in zip(text, records)), text[:3])
            one = cluster.kiln("logs", job, "--rank", "1").stdout.splitlines()
            self.assertEqual(one, [r["line"] for r in records if r["rank"] == 1])

            bad = cluster.kiln("logs", job, "--level", "loud")
            self.assertEqual(bad.returncode, 2, bad.stderr)
            self.assertIn("--level 'loud'", bad.stderr)
            bad = cluster.kiln("logs", job, "--grep", "(")
            self.assertEqual(bad.returncode, 2, bad.stderr)
            self.assertIn("--grep", bad.stderr)


if __name__ == "__main__":
    unittest.main()
