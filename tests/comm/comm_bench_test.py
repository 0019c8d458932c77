"""`kiln comm-bench` end to end, with real processes: results are checked and reported per size,
and faults are handled the way users rely on: kill -9 one of 4 ranks mid-collective and the
others fail within (timeout + 2 s), naming the dead rank, with flight-recorder dumps that name it
too; SIGUSR1 makes a rank dump its flight recorder without stopping."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import KILN_BIN, run_kiln, wait_until  # noqa: E402


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


class CommBenchTest(unittest.TestCase):
    def test_json_rows_for_every_size_and_checked_results(self):
        for transport in ["shm", "tcp"]:
            r = run_kiln("comm-bench", "--op", "allreduce", "--ranks", "3", "--transport",
                         transport, "--min-bytes", "8", "--max-bytes", "64K", "--iters", "5",
                         "--json", timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            rows = [j for j in json_lines(r.stdout) if "bytes" in j]
            self.assertEqual([row["bytes"] for row in rows],
                             [8 * 2 ** k for k in range(14)])  # 8 B .. 64 KiB, doubling
            for row in rows:
                self.assertEqual(row["op"], "allreduce")
                self.assertEqual(row["ranks"], 3)
                self.assertEqual(row["transport"], transport)
                self.assertTrue(row["correct"], row)
                self.assertGreater(row["time_us"], 0)
                # nccl-tests: busbw = algbw * 2(n-1)/n for allreduce
                self.assertAlmostEqual(row["busbw_GBps"], row["algbw_GBps"] * 4 / 3, places=6)
                self.assertAlmostEqual(row["algbw_GBps"], row["bytes"] / row["time_us"] / 1e3,
                                       places=6)

    def test_every_benchmarked_op_runs_and_checks(self):
        for op in ["reduce_scatter", "allgather", "broadcast", "reduce", "all_to_all"]:
            r = run_kiln("comm-bench", "--op", op, "--ranks", "4", "--min-bytes", "1K",
                         "--max-bytes", "256K", "--iters", "3", "--json", timeout=120)
            self.assertEqual(r.returncode, 0, op + ": " + r.stderr)
            rows = [j for j in json_lines(r.stdout) if "bytes" in j]
            self.assertTrue(rows and all(row["correct"] for row in rows), op)

    def test_fake_hosts_mix_shared_memory_and_tcp(self):
        r = run_kiln("comm-bench", "--op", "allreduce", "--ranks", "4", "--hosts", "2",
                     "--min-bytes", "1M", "--max-bytes", "1M", "--iters", "3", "--json",
                     timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        layouts = [json.loads(j["layout"]) for j in json_lines(r.stderr)
                   if j.get("msg") == "communicator ready"]
        self.assertEqual(len(layouts), 4)
        for layout in layouts:
            kinds = {p["link"] for p in layout["peers"]}
            self.assertEqual(kinds, {"shm", "tcp"}, layout)
            self.assertTrue(layout["hierarchical"])

    def test_bad_flags_are_bad_input(self):
        r = run_kiln("comm-bench", "--op", "allreduce", "--transport", "carrier-pigeon")
        self.assertEqual(r.returncode, 2)
        r = run_kiln("comm-bench", "--op", "frobnicate", "--ranks", "2", "--max-bytes", "8",
                     timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("frobnicate", r.stderr)


class CommFaultTest(unittest.TestCase):
    TIMEOUT_MS = 5000

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kiln-flight-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def start_bench(self, *extra):
        args = [KILN_BIN, "comm-bench", "--op", "allreduce", "--ranks", "4", "--min-bytes",
                "16M", "--max-bytes", "16M", "--iters", "100000", "--timeout-ms",
                str(self.TIMEOUT_MS), "--flight-recorder-dir", self.dir, "--json", *extra]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pids = {}
        stderr_lines = []

        def ranks_started():
            line = proc.stderr.readline()
            if line:
                stderr_lines.append(line)
                j = json.loads(line) if line.startswith("{") else {}
                if j.get("msg") == "rank started":
                    pids[j["rank"]] = j["pid"]
            return len(pids) == 4 or proc.poll() is not None

        wait_until(ranks_started, 30, "4 ranks to start")
        self.assertEqual(len(pids), 4, "".join(stderr_lines))
        return proc, pids, stderr_lines

    def kill_rank_mid_collective(self, transport):
        proc, pids, early = self.start_bench("--transport", transport)
        time.sleep(2.0)  # well into the timed loop of 16 MiB allreduces
        self.assertIsNone(proc.poll(), "benchmark ended early")
        os.kill(pids[2], signal.SIGKILL)
        killed_at = time.monotonic()
        try:
            out, err = proc.communicate(timeout=self.TIMEOUT_MS / 1000 + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            self.fail("comm-bench hung after a rank was killed")
        elapsed = time.monotonic() - killed_at
        err = "".join(early) + err
        self.assertEqual(proc.returncode, 1, err)
        # The launcher says which rank failed first, and how.
        self.assertIn(f"rank 2 (pid {pids[2]}) was killed by signal 9 (SIGKILL)", err)
        # Each survivor failed on its own (not killed by the launcher), naming rank 2.
        failures = [j for j in json_lines(err) if j.get("msg") == "benchmark failed"]
        self.assertEqual(sorted(int(j["component"].rsplit("rank", 1)[1]) for j in failures),
                         [0, 1, 3], err[-6000:])
        # The collective each was in when rank 2 died: the timed allreduce, or the barrier that
        # starts a batch (the benchmark's only other collective).
        for j in failures:
            self.assertRegex(j["error"], r"rank 2 \(host [^)]*\)", j)
            self.assertRegex(j["error"], r"(allreduce seq=\d+ bytes=16777216|barrier seq=\d+)", j)
        self.assertNotIn("by the launcher", err)
        # Within the op timeout plus 2 s.
        self.assertLess(elapsed, self.TIMEOUT_MS / 1000 + 2.0, err)
        # Every survivor's flight recorder names rank 2 as the culprit of its failed op.
        for rank in [0, 1, 3]:
            path = os.path.join(self.dir, f"flight-rank{rank}.json")
            self.assertTrue(os.path.exists(path), f"no dump for rank {rank}: {err}")
            with open(path) as f:
                dump = json.load(f)
            failed = [e for e in dump["entries"] if e["state"] == "failed"]
            self.assertEqual(len(failed), 1, dump)
            self.assertEqual(failed[0]["culprit_rank"], 2, failed[0])
            self.assertIn(failed[0]["op"], ["allreduce", "barrier"])

    def test_kill_9_one_of_4_ranks_over_shared_memory(self):
        self.kill_rank_mid_collective("shm")

    def test_kill_9_one_of_4_ranks_over_tcp(self):
        self.kill_rank_mid_collective("tcp")

    def test_sigusr1_dumps_the_flight_recorder_without_stopping(self):
        proc, pids, _ = self.start_bench("--transport", "shm")
        try:
            time.sleep(1.5)
            os.kill(pids[1], signal.SIGUSR1)
            path = os.path.join(self.dir, "flight-rank1.json")
            wait_until(lambda: os.path.exists(path), 10, "the SIGUSR1 dump")
            with open(path) as f:
                dump = json.load(f)
            self.assertEqual(dump["rank"], 1)
            self.assertEqual(dump["reason"], "SIGUSR1")
            self.assertTrue(any(e["op"] == "allreduce" and e["bytes"] == 16 << 20
                                for e in dump["entries"]), dump["entries"][-3:])
            self.assertIsNone(proc.poll(), "SIGUSR1 must not stop the rank")
        finally:
            proc.send_signal(signal.SIGTERM)
            for pid in pids.values():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.communicate(timeout=60)


if __name__ == "__main__":
    unittest.main()
