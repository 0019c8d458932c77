"""End-to-end tests of the kiln CLI: version, facts, help, bad input, and the agent's lifecycle."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import Agent, SOURCE_DIR, http_get, run_kiln  # noqa: E402

# Every field of `kiln facts --json`, by section. The document must hold each one, null where
# the machine cannot say; nothing else may appear at the top level.
FACT_FIELDS = {
    "kiln": ["version", "git_commit", "git_dirty", "build_type", "compiler", "sanitizer",
             "build_id"],
    "host": ["hostname", "boot_id", "uptime_s"],
    "os": ["id", "version_id", "pretty_name"],
    "kernel": ["release", "version", "machine"],
    "cpu": ["vendor", "model", "logical_cores", "physical_cores", "sockets", "isa_flags",
            "best_isa"],
    "memory": ["total_bytes", "available_bytes", "hugepages_total"],
    "load": ["cpus_online", "loadavg_1m"],
    "kernel_params": ["shm_total_bytes", "shm_free_bytes", "shmmax_bytes", "open_files_soft",
                      "open_files_hard", "somaxconn", "rmem_max_bytes", "wmem_max_bytes",
                      "overcommit_memory", "transparent_hugepage", "numa_nodes", "cgroup_layout"],
    "libraries": ["glibc", "libstdcxx", "fmt", "spdlog", "nlohmann_json", "yaml_cpp", "cli11",
                  "cpp_httplib", "prometheus_cpp", "xxhash", "openssl"],
    "gpu": ["driver_version", "cuda_driver_version", "cuda_runtime_version", "devices"],
    "blas": ["library", "config", "core", "core_isa", "cpu_isa", "fallback", "coretype_env",
             "core_chosen_by_openblas"],
    "gemm": ["library", "why"],
}


def git_head():
    out = subprocess.run(["git", "-C", SOURCE_DIR, "rev-parse", "HEAD"], capture_output=True,
                         text=True)
    return out.stdout.strip() if out.returncode == 0 else None


class VersionTest(unittest.TestCase):
    def test_json_names_version_commit_build_and_isa(self):
        r = run_kiln("version", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 1, "one JSON object per line")
        v = json.loads(lines[0])
        self.assertRegex(v["version"], r"^\d+\.\d+\.\d+$")
        head = git_head()
        if head is not None:
            self.assertEqual(v["git_commit"], head)
        self.assertIn(v["build_type"], ["Release", "RelWithDebInfo", "Debug", "MinSizeRel"])
        self.assertTrue(v["compiler"].startswith("GNU ") or v["compiler"].startswith("Clang "))
        self.assertIn(v["isa"], ["scalar", "avx2", "avx512"])
        self.assertRegex(v["build_id"], r"^[0-9a-f]{40}$")

    def test_human_output_has_the_same_facts(self):
        r = run_kiln("version")
        self.assertEqual(r.returncode, 0, r.stderr)
        v = json.loads(run_kiln("version", "--json").stdout)
        self.assertIn("kiln " + v["version"], r.stdout)
        self.assertIn(v["git_commit"], r.stdout)
        self.assertIn(v["isa"], r.stdout)


class FactsTest(unittest.TestCase):
    def test_every_field_present_or_explicitly_null(self):
        r = run_kiln("facts", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 1)
        facts = json.loads(lines[0])
        self.assertEqual(facts["schema"], "kiln.facts/1")
        self.assertEqual(set(facts), {"schema", "collected_at", "shared_objects", "environment",
                                      "disks", *FACT_FIELDS})
        # No directory asked for: no disks; each one asked for, with its free space.
        self.assertEqual(facts["disks"], [])
        r = run_kiln("facts", "--json", "--dir", "/tmp", "--dir", "/no/such/dir")
        disks = json.loads(r.stdout)["disks"]
        self.assertEqual([d["path"] for d in disks], ["/tmp", "/no/such/dir"])
        self.assertGreater(disks[0]["free_bytes"], 0)
        self.assertGreaterEqual(disks[0]["total_bytes"], disks[0]["free_bytes"])
        self.assertIsNone(disks[1]["free_bytes"])
        self.assertEqual(facts["load"]["cpus_online"], os.cpu_count())
        for section, fields in FACT_FIELDS.items():
            for field in fields:
                self.assertIn(field, facts[section], f"{section}.{field} missing")
        self.assertIsInstance(facts["shared_objects"], dict)
        # The behaviour-changing environment, a credential's value never in it.
        r = run_kiln("facts", "--json", env=dict(os.environ, OMP_NUM_THREADS="3",
                                                  KILN_JOB_TOKEN="hunter2", UNRELATED="x"))
        env = json.loads(r.stdout)["environment"]
        self.assertEqual(env["OMP_NUM_THREADS"], "3")
        self.assertEqual(env["KILN_JOB_TOKEN"], "(redacted)")
        self.assertNotIn("UNRELATED", env)
        self.assertNotIn("hunter2", r.stdout)

    def openblas_core(self, env):
        """The core OpenBLAS itself reports under `env`, asked through ctypes (not kiln)."""
        code = ("import ctypes\n"
                "lib = ctypes.CDLL('libopenblas.so.0')\n"
                "lib.openblas_get_corename.restype = ctypes.c_char_p\n"
                "print(lib.openblas_get_corename().decode())\n")
        r = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True,
                           env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.strip()

    def test_facts_report_the_blas_core_and_keep_a_users_choice(self):
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
        blas = json.loads(run_kiln("facts", "--json", env=env).stdout)["blas"]
        self.assertEqual(blas["library"], "OpenBLAS")
        self.assertIn("OpenBLAS", blas["config"])
        own = self.openblas_core(env)
        self.assertEqual(blas["core_chosen_by_openblas"], own)
        if blas["core"] != own:
            # OpenBLAS fell back on this CPU and kiln forced the core for its ISA.
            self.assertEqual(blas["coretype_env"], blas["core"])
            self.assertEqual(blas["core_isa"], blas["cpu_isa"])
        else:
            self.assertIsNone(blas["coretype_env"])
        self.assertEqual(blas["cpu_isa"],
                         json.loads(run_kiln("facts", "--json").stdout)["cpu"]["best_isa"])
        # A user's OPENBLAS_CORETYPE is kept, even a poor one, and reported as a fallback.
        env["OPENBLAS_CORETYPE"] = "Prescott"
        blas = json.loads(run_kiln("facts", "--json", env=env).stdout)["blas"]
        self.assertEqual((blas["core"], blas["core_isa"], blas["coretype_env"]),
                         ("Prescott", "scalar", "Prescott"))
        self.assertEqual(blas["fallback"], blas["cpu_isa"] != "scalar")

    def test_the_gemm_library_is_raced_cached_or_pinned(self):
        # Issue 11: kiln_ops calls the GEMM library that measures faster here, raced once per
        # boot and cached; KILN_GEMM pins one, and a bad value is named.
        with tempfile.TemporaryDirectory() as tmp:
            cache = os.path.join(tmp, "gemm-race.json")
            env = {k: v for k, v in os.environ.items() if k != "KILN_GEMM"}
            env["KILN_GEMM_CACHE"] = cache
            gemm = json.loads(run_kiln("facts", "--json", env=env).stdout)["gemm"]
            with open(cache) as f:
                cached = json.load(f)
            race = gemm["race"]
            self.assertEqual(race["openblas_gflops"], cached["openblas_gflops"])
            self.assertEqual(race["onednn_gflops"], cached["onednn_gflops"])
            faster = race["onednn_over_openblas"] >= 1.03
            self.assertEqual(gemm["library"], "onednn" if faster else "openblas")
            self.assertTrue(gemm["why"].startswith("race: oneDNN "), gemm["why"])
            # The second process reads the cache: the same figures, not a new race.
            again = json.loads(run_kiln("facts", "--json", env=env).stdout)["gemm"]
            self.assertEqual(again["race"], race)
            env["KILN_GEMM"] = "onednn"
            pinned = json.loads(run_kiln("facts", "--json", env=env).stdout)["gemm"]
            self.assertEqual((pinned["library"], pinned["why"]), ("onednn", "KILN_GEMM=onednn"))
            env["KILN_GEMM"] = "mkl"
            r = run_kiln("ops-bench", "--op", "matmul", "--shape", "M=8,N=8,K=8", "--threads", "1",
                         env=env)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("KILN_GEMM: 'mkl' is not a GEMM library: openblas, onednn or auto",
                          r.stderr)

    def test_facts_agree_with_the_machine(self):
        facts = json.loads(run_kiln("facts", "--json").stdout)
        self.assertEqual(facts["kernel"]["release"], os.uname().release)
        self.assertEqual(facts["kernel"]["machine"], os.uname().machine)
        self.assertEqual(facts["host"]["hostname"], os.uname().nodename)
        self.assertEqual(facts["cpu"]["logical_cores"], os.cpu_count())
        with open("/proc/meminfo") as f:
            total_kb = int(next(l for l in f if l.startswith("MemTotal:")).split()[1])
        self.assertEqual(facts["memory"]["total_bytes"], total_kb * 1024)
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.assertEqual(facts["kernel_params"]["open_files_soft"], soft)
        self.assertEqual(facts["kernel_params"]["open_files_hard"], hard)
        st = os.statvfs("/dev/shm")
        self.assertEqual(facts["kernel_params"]["shm_total_bytes"], st.f_blocks * st.f_frsize)
        self.assertEqual(facts["kiln"]["version"], json.loads(run_kiln("version", "--json").stdout)["version"])

    def test_human_output_is_flat_key_value_lines(self):
        r = run_kiln("facts")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("kernel.release: " + os.uname().release, r.stdout.splitlines())


class HelpAndBadInputTest(unittest.TestCase):
    def test_help_lists_subcommands(self):
        r = run_kiln("--help")
        self.assertEqual(r.returncode, 0)
        for sub in ["version", "facts", "agent"]:
            self.assertIn(sub, r.stdout)

    def test_unknown_subcommand_is_bad_input(self):
        r = run_kiln("frobnicate")
        self.assertEqual(r.returncode, 2)

    def test_bad_log_level_is_bad_input(self):
        r = run_kiln("--log-level", "loud", "agent", "--duration-s", "0.1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("loud", r.stderr)


class AgentTest(unittest.TestCase):
    def test_serves_until_sigterm_then_exits_cleanly(self):
        with Agent() as agent:
            status, body = http_get(agent.url("/healthz"))
            self.assertEqual(status, 200)
            self.assertEqual(json.loads(body)["status"], "ok")
            status, body = http_get(agent.url("/facts"))
            self.assertEqual(json.loads(body)["schema"], "kiln.facts/1")
            self.assertEqual(agent.stop(), 0)
            stopped = json.loads(agent.proc.stdout.readline())
            self.assertEqual(stopped, {"event": "stopped", "signal": int(signal.SIGTERM)})
            # Logs are JSON lines on stderr with the fixed fields first.
            logs = [json.loads(l) for l in agent.proc.stderr.read().splitlines()]
            self.assertEqual(list(logs[0])[:4], ["ts", "level", "component", "msg"])
            self.assertEqual(logs[-1]["msg"], "agent stopped")

    def test_config_file_labels_reach_the_metrics(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write("heartbeat_interval_ms: 50\nlabels:\n  rack: r7\n  switch: s2\n")
        try:
            with Agent("--config", f.name) as agent:
                _, body = http_get(agent.url("/metrics"))
                self.assertIn('kiln_agent_info{rack="r7",switch="s2"} 1', body)
                agent.stop()
        finally:
            os.unlink(f.name)

    def test_malformed_config_names_file_line_and_key(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write("metrics:\n  port: 9400\n  bnid: 0.0.0.0\nheartbeat_interval_ms: often\n")
        try:
            r = run_kiln("agent", "--config", f.name, timeout=30)
            self.assertEqual(r.returncode, 2)
            self.assertIn(f"{f.name}:3:3: key 'metrics.bnid': unknown key; did you mean 'bind'?",
                          r.stderr)
            self.assertIn(f"{f.name}:4:24: key 'heartbeat_interval_ms': expected an integer, "
                          "got 'often'", r.stderr)
        finally:
            os.unlink(f.name)

    def test_port_in_use_is_reported(self):
        with Agent() as first:
            r = run_kiln("agent", "--metrics-port", str(first.port), "--duration-s", "1")
            self.assertEqual(r.returncode, 1)
            self.assertIn(f"127.0.0.1:{first.port}", r.stderr)
            first.stop()


if __name__ == "__main__":
    unittest.main()
