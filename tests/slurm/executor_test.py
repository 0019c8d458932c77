"""`kiln serve --executor slurm` on a real local Slurm cluster (issue 14), nothing mocked:

- submit, status, events with the Slurm job ids, cancel (the allocation goes with the job);
- kill -9 a rank: the fault names the culprit, whose node is drained in Slurm with Kiln's reason,
  and the job restarts as a new allocation that excludes it, resuming from its newest checkpoint;
- `scontrol update NodeName=n3 State=DOWN` makes Kiln cordon n3, and RESUME brings it back;
- a job larger than the cluster is refused at submit with a clear error;
- with `--slurm-placement slurm`, Slurm picks the gang's nodes (none Kiln cordoned) and they
  become the job's.

The model is the 2-layer GPT-2 of tests/coordinator/recovery_test.py, one rank per node.
"""
import json
import os
import signal
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "coordinator"))
from kiln_cluster import Cluster  # noqa: E402
from kiln_slurm import LocalSlurm, slurm_available  # noqa: E402
from kiln_test import wait_until  # noqa: E402
from recovery_test import TRAIN_DIR, step_lines, write_job  # noqa: E402

STEPS = 48


def rank_steps(cluster, node, job, attempt, rank):
    """The step numbers in a rank's log (include/kiln/sched/rank_log.h: one JSON record per
    line, the rank's own line in "line"), read from the file its agent wrote."""
    path = os.path.join(cluster.state, "slurm", "nodes", node, job, f"attempt-{attempt}",
                        f"rank-{rank}.log")
    steps = []
    with open(path, errors="replace") as f:
        for record in f:
            try:
                line = json.loads(record).get("line", "")
                if line.startswith('{"step"'):
                    steps.append(json.loads(line)["step"])
            except ValueError:
                continue
    return steps


class SlurmExecutorTest(unittest.TestCase):
    def setUp(self):
        if not slurm_available(self):
            return
        if not os.path.isdir(TRAIN_DIR):
            self.fail("no training data: run scripts/fetch-data")
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-slurm-executor-")
        self.addCleanup(self.tmp.cleanup)

    def squeue(self, slurm):
        r = slurm.client(["squeue", "-h", "-t", "all", "-o", "%i|%j|%T|%N"])
        return [line.split("|") for line in r.stdout.splitlines() if line.strip()]

    def wait_step(self, cluster, job, attempt, step, timeout_s=180):
        def reached():
            losses, _ = step_lines(cluster, job, attempt)
            return max(losses) >= step if losses else False
        wait_until(reached, timeout_s, f"job {job} attempt {attempt} to pass step {step}")

    def test_jobs_faults_and_node_states_through_slurm(self):
        with LocalSlurm("ex", 53) as slurm, \
                Cluster(nodes=4, executor="slurm",
                        extra=["--cordon-after", "3", "--rank-address", "127.0.0.1"],
                        env={"SLURM_CONF": slurm.conf}) as cluster:
            nodes = {n["name"]: n for n in cluster.node_list()}
            self.assertEqual(sorted(nodes), ["n1", "n2", "n3", "n4"])

            # Larger than the cluster: refused at submit, never pending.
            big = write_job(self.tmp.name, "big", nodes=5)
            r = cluster.kiln("submit", big)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("needs 5 node(s) but the cluster has 4", r.stderr)

            job = cluster.submit(write_job(self.tmp.name, "faulty", steps=STEPS))
            cluster.wait_state(job, "running", 120)
            # The ranks may report before the executor's next squeue (once a second) sees the
            # allocation RUNNING: wait for that event rather than race it.
            running = wait_until(
                lambda: [e for e in cluster.events(job) if e["type"] == "allocation_running"],
                30, "the allocation_running event")
            events = cluster.events(job)
            alloc = [e for e in events if e["type"] == "allocation"]
            self.assertEqual(len(alloc), 1, events)
            first_id = alloc[0]["slurm_job_id"]
            self.assertEqual([e["slurm_job_id"] for e in running], [first_id], events)
            jobs = self.squeue(slurm)
            self.assertIn([first_id, f"kiln.{job}.0", "RUNNING", "n[1-2]"], jobs)
            status = cluster.status(job)
            self.assertEqual(status["nodes"], ["n1", "n2"])

            # kill -9 rank 1: a new allocation without its node, which Slurm drains for Kiln.
            self.wait_step(cluster, job, 0, 9)  # past the checkpoint of step 8
            pid, node = cluster.rank_pid(job, 0, 1)
            self.assertEqual(node, "n2")
            os.kill(pid, signal.SIGKILL)
            fault = wait_until(lambda: [e for e in cluster.events(job) if e["type"] == "fault"],
                               30, "the fault event")[0]
            self.assertEqual(fault["cause"], "rank_exit")
            self.assertEqual(fault["node"], "n2")
            state, reason = wait_until(
                lambda: slurm.node_state("n2") if slurm.node_state("n2")[0].startswith("drain")
                else None, 30, "n2 drained in Slurm")
            self.assertTrue(reason.startswith("kiln: suspect: job " + job), reason)
            final = cluster.wait_state(job, ["succeeded", "failed"], 300)
            self.assertEqual(final["state"], "succeeded", final)
            self.assertEqual(final["attempt"], 1)
            self.assertNotIn("n2", final["nodes"])
            events = cluster.events(job)
            ids = [e["slurm_job_id"] for e in events if e["type"] == "allocation"]
            self.assertEqual(len(ids), 2, events)
            self.assertNotEqual(ids[0], ids[1])
            # The first attempt's allocation was cancelled by Kiln when the attempt ended.
            by_id = {j[0]: j for j in self.squeue(slurm)}
            self.assertIn(by_id[ids[0]][2], ("CANCELLED", "COMPLETED"), by_id[ids[0]])
            self.assertNotIn("n2", by_id[ids[1]][3])
            types = [e["type"] for e in events]
            self.assertEqual(types.count("fault"), 1, types)
            # Attempt 1 resumed from the newest checkpoint (step 8 or later), read from rank 0's
            # log where its agent wrote it (the agent left with its allocation).
            steps = rank_steps(cluster, final["nodes"][0], job, 1, 0)
            self.assertEqual(max(steps), STEPS)
            self.assertGreaterEqual(min(steps) - 1, 8, steps)

            # scontrol update NodeName=n3 State=DOWN: Kiln cordons n3 with Slurm's reason; once
            # resumed in Slurm it is ready again.
            slurm.client(["scontrol", "update", "NodeName=n3", "State=DOWN", "Reason=chaos"],
                         check=True)
            n3 = wait_until(lambda: next((n for n in cluster.node_list()
                                          if n["name"] == "n3" and n["state"] == "cordoned"),
                                         None), 15, "Kiln to cordon n3")
            self.assertEqual(n3["reason"], "slurm: down: chaos")
            slurm.client(["scontrol", "update", "NodeName=n3", "State=RESUME"], check=True)
            wait_until(lambda: next((n for n in cluster.node_list()
                                     if n["name"] == "n3" and n["state"] == "ready"), None),
                       15, "Kiln to see n3 back")

            # Cancel: the job ends cancelled and its allocation is gone from Slurm.
            other = cluster.submit(write_job(self.tmp.name, "cancelled", steps=100000))
            cluster.wait_state(other, "running", 120)
            other_id = [e for e in cluster.events(other) if e["type"] == "allocation"][0][
                "slurm_job_id"]
            r = cluster.kiln("cancel", other)
            self.assertEqual(r.returncode, 0, r.stderr)
            cluster.wait_state(other, "cancelled", 60)
            wait_until(lambda: any(j[0] == other_id and j[2] in ("CANCELLED", "COMPLETED")
                                   for j in self.squeue(slurm)), 30,
                       "the allocation to end in Slurm")

    def test_slurm_places_the_gang_when_told_to(self):
        # `--slurm-placement slurm`: sbatch gets only the node count and the nodes Kiln will not
        # have (--exclude); the nodes Slurm picks become the job's.
        with LocalSlurm("ep", 54) as slurm, \
                Cluster(nodes=4, executor="slurm",
                        extra=["--rank-address", "127.0.0.1", "--slurm-placement", "slurm"],
                        env={"SLURM_CONF": slurm.conf}) as cluster:
            r = cluster.kiln("cordon", "n1", "--reason", "disk errors")
            self.assertEqual(r.returncode, 0, r.stderr)
            job = cluster.submit(write_job(self.tmp.name, "placed", steps=STEPS))
            running = wait_until(
                lambda: [e for e in cluster.events(job) if e["type"] == "allocation_running"],
                120, "the allocation to run")[0]
            info = slurm.job_info(running["slurm_job_id"])
            self.assertEqual(info.get("ReqNodeList"), "(null)", info)  # no --nodelist
            self.assertEqual(info.get("ExcNodeList"), "n1", info)
            slurm_nodes = slurm.client(["scontrol", "show", "hostnames", info["NodeList"]],
                                       check=True).stdout.split()
            self.assertEqual(sorted(running["nodes"]), sorted(slurm_nodes), running)

            # `kiln logs` reads a rank's log from the agent inside the allocation.
            def rank0_log():
                try:
                    return cluster.logs(job, 0)
                except AssertionError:  # not started yet
                    return None
            self.assertTrue(wait_until(rank0_log, 60, "rank 0's log through kiln logs"))
            final = cluster.wait_state(job, ["succeeded", "failed"], 300)
            self.assertEqual(final["state"], "succeeded", final)
            self.assertEqual(sorted(final["nodes"]), sorted(slurm_nodes))
            print(f"\nSlurm placed {job} on {info['NodeList']} (excluded {info['ExcNodeList']})",
                  flush=True)


if __name__ == "__main__":
    unittest.main()
