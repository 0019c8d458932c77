"""Error signatures (issue 16): what a job's failures came down to, one line each, in `kiln status
JOB` (and the page, which reads the same API): a rank killed with SIGKILL, a loss made NaN by
the trainer's fault-drill flag, a checkpoint directory on a full disk (a 1 MiB tmpfs), and a
rank the kernel's OOM killer kills in a memory cgroup of 100 MiB. Each runs a real job on the
embedded cluster to its failure.
"""
import os
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_cluster import Cluster  # noqa: E402
from kiln_test import SOURCE_DIR, wait_until  # noqa: E402

TRAIN = ('[kiln, train, configs/tiny.yaml, --threads, "1", --batch, "2", --seq, "64", '
         '--val-every, "0", --json, {extra}]')


def spec(name, nodes, extra, checkpoint=""):
    return (f"name: {name}\ncommand: {TRAIN.format(extra=extra)}\nnodes: {nodes}\n"
            f"max_restarts: 0\nprogress_timeout: 60s\n{checkpoint}")


class SignaturesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="kiln-signatures-")
        cls.cluster = Cluster(nodes=2, slots=1).start()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()
        cls.tmp.cleanup()

    def run_job(self, name, text):
        path = os.path.join(self.tmp.name, name + ".yaml")
        with open(path, "w") as f:
            f.write(text)
        return self.cluster.submit(path, cwd=SOURCE_DIR)

    def failed_with(self, job, *kinds):
        """The job's one signature of any of `kinds` once it failed (checked by the caller)."""
        self.cluster.wait_state(job, "failed", 180)
        status = self.cluster.status(job)
        sigs = [s for s in status["signatures"] if s["kind"] in kinds]
        self.assertEqual(len(sigs), 1, status["signatures"])
        text = self.cluster.kiln("status", job).stdout
        self.assertIn(sigs[0]["text"], text, "`kiln status JOB` shows the signature")
        print(f"{sigs[0]['kind']}: {sigs[0]['text']}", file=sys.stderr)
        return sigs[0]

    def test_a_killed_rank_is_named_with_its_node_signal_and_step(self):
        job = self.run_job("killed", spec("killed", 2, '--max-steps, "100000"'))
        wait_until(lambda: self.cluster.status(job)["last_step"] >= 3, 120, "three steps")
        pid, node = self.cluster.rank_pid(job, 0, 1)
        os.kill(pid, signal.SIGKILL)
        # Which report reaches the coordinator first is a race: rank 1's own end (killed), or
        # rank 0's failed collective, whose flight recorder blames rank 1. Either names rank 1.
        sig = self.failed_with(job, "signal", "comm")
        self.assertEqual((sig["rank"], sig["node"], sig["attempt"]), (1, node, 0))
        self.assertGreaterEqual(sig["step"], 3)
        if sig["kind"] == "signal":
            self.assertEqual(sig["text"], f"rank 1 on {node} killed by signal 9 (SIGKILL) at "
                                          f"step {sig['step']}")
        else:
            self.assertIn(f"blames rank 1 (rank 1 on {node})", sig["text"])

    def test_a_nan_loss_from_the_drill_flag_is_named_with_its_step(self):
        job = self.run_job("nan", spec("nan", 1, '--max-steps, "50", --debug-nan-step, "4"'))
        sig = self.failed_with(job, "nan_loss")
        self.assertEqual((sig["rank"], sig["step"]), (0, 4))
        self.assertIn("the loss is not finite at step 4", sig["text"])
        self.assertIn("training loss is nan", sig["text"])

    def test_a_rank_the_oom_killer_killed_is_named_out_of_memory(self):
        # The rank puts itself in a memory cgroup of 100 MiB and allocates 400 MiB: the kernel's
        # OOM killer kills it (recipe: cgroup v1 here, v2 elsewhere).
        name = f"kiln-oom-{os.getpid()}"
        script = os.path.join(self.tmp.name, "oom.sh")
        with open(script, "w") as f:
            f.write(f"""set -e
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
  cg=/sys/fs/cgroup/{name}; mkdir -p $cg; echo 104857600 > $cg/memory.max
else
  cg=/sys/fs/cgroup/memory$(awk -F: '$2=="memory"{{print $3}}' /proc/self/cgroup)/{name}
  mkdir -p $cg; echo 104857600 > $cg/memory.limit_in_bytes
fi
echo $cg > {self.tmp.name}/oom.cgroup
echo $$ > $cg/cgroup.procs
exec python3 -c "x = bytearray(400 << 20)"
""")
        job = self.run_job("oom", f"name: oom\ncommand: [sh, {script}]\nnodes: 1\nmax_restarts: 0\n")
        try:
            sig = self.failed_with(job, "oom")
            self.assertEqual(sig["rank"], 0)
            self.assertIn("killed by the kernel's OOM killer (signal 9 (SIGKILL))", sig["text"])
        finally:
            cgroup_file = os.path.join(self.tmp.name, "oom.cgroup")
            if os.path.exists(cgroup_file):
                with open(cgroup_file) as f:
                    os.rmdir(f.read().strip())  # empty once its one process is gone

    def test_a_full_checkpoint_disk_is_named(self):
        disk = os.path.join(self.tmp.name, "full")
        os.makedirs(disk)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", disk], check=True)
        try:
            job = self.run_job("full", spec("full", 1, '--max-steps, "6"',
                                            f"checkpoint: {{dir: {disk}/ck, every: 2}}\n"))
            sig = self.failed_with(job, "checkpoint")
            self.assertIn("failed to checkpoint", sig["text"])
            self.assertIn("No space left on device", sig["text"])
        finally:
            subprocess.run(["umount", "-l", disk], check=False)


if __name__ == "__main__":
    unittest.main()
