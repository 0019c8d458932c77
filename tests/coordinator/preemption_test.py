"""Checkpoint-aware preemption with real processes (issue 13): on `kiln serve --local-nodes 2`
with one slot per node, a low-priority 2-node training job runs; a high-priority job of the same
queue arrives and needs both nodes. The policy preempts the low one: its ranks get SIGTERM,
finish the step in progress, write a checkpoint and exit 75; the coordinator requeues it (no
restart spent), runs the high-priority job, then resumes the low one from that checkpoint, and
its losses are bit-identical to an undisturbed run of the same job. No step is lost: attempt 1
starts right after the last step attempt 0 finished.
"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiln_cluster import Cluster  # noqa: E402
from kiln_test import wait_until  # noqa: E402
from recovery_test import TRAIN_DIR, step_lines, write_job  # noqa: E402

STEPS = 40


def with_priority(spec_path, priority):
    with open(spec_path, "a") as f:
        f.write(f"priority: {priority}\n")
    return spec_path


class PreemptionTest(unittest.TestCase):
    def setUp(self):
        if not os.path.isdir(TRAIN_DIR):
            self.fail("no training data: run scripts/fetch-data")
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-preempt-")
        self.addCleanup(self.tmp.cleanup)

    def test_a_higher_priority_job_preempts_a_training_job_which_resumes_bit_identical(self):
        extra = ["--preempt-grace-s", "60", "--preempt-min-runtime-s", "0"]
        with Cluster(nodes=2, slots=1, extra=extra) as cluster:
            clean = cluster.submit(write_job(self.tmp.name, "clean", steps=STEPS))
            cluster.wait_state(clean, "succeeded", 300)
            want, want_val = step_lines(cluster, clean, 0)
            self.assertEqual(max(want), STEPS)

            low = cluster.submit(with_priority(write_job(self.tmp.name, "low", steps=STEPS), 0))

            def reached(step):
                losses, _ = step_lines(cluster, low, 0)
                return losses and max(losses) >= step
            wait_until(lambda: reached(6), 120, "the low-priority job to pass step 6")
            high = cluster.submit(with_priority(write_job(self.tmp.name, "high", steps=8), 10))

            final_high = cluster.wait_state(high, ["succeeded", "failed"], 300)
            self.assertEqual(final_high["state"], "succeeded", final_high)
            final_low = cluster.wait_state(low, ["succeeded", "failed"], 300)
            self.assertEqual(final_low["state"], "succeeded", final_low)
            self.assertEqual(final_low["attempt"], 1)
            self.assertEqual(final_low["restarts"], 0, "a preemption spends no restart")

            events = cluster.events(low)
            types = [e["type"] for e in events]
            self.assertEqual(types, ["queued", "admitted", "placed", "running", "preempted",
                                     "stopping", "requeued", "queued", "admitted", "placed",
                                     "running", "succeeded"])
            preempted = events[types.index("preempted")]
            self.assertEqual(preempted["by"], high)
            self.assertIn("priority 10", preempted["why"])
            # The high-priority job was placed only after the low one's ranks had stopped.
            high_events = cluster.events(high)
            placed = [e for e in high_events if e["type"] == "placed"][0]
            requeued = events[types.index("requeued")]
            self.assertGreaterEqual(placed["seq"], requeued["seq"])

            old, _ = step_lines(cluster, low, 0)
            got, got_val = step_lines(cluster, low, 1)
            # SIGTERM: the step in progress finished and was checkpointed: nothing was lost.
            self.assertEqual(min(got), max(old) + 1, "attempt 1 resumes after attempt 0's last step")
            for step in old:
                self.assertEqual(old[step], want[step], f"loss at step {step} (attempt 0)")
            for step in got:
                self.assertEqual(got[step], want[step], f"loss at step {step} (attempt 1)")
            for step, val in got_val.items():
                self.assertEqual(val, want_val[step], f"val_loss at step {step}")
            self.assertEqual(max(got), STEPS)
            print(f"\npreempted at step {max(old)}; resumed at step {min(got)}; "
                  f"{len(got)} steps after the resume, all bit-identical to the undisturbed run")


if __name__ == "__main__":
    unittest.main()
