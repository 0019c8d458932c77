"""Observability against the real tools: promtool lints the exposition, and a real Prometheus
server (Debian's `prometheus`) scrapes a kiln agent over loopback; the values read back through
Prometheus' HTTP API must equal what the agent serves."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import Agent, free_port, http_get, wait_until  # noqa: E402


class PromtoolTest(unittest.TestCase):
    def test_exposition_passes_promtool_check_metrics(self):
        with Agent() as agent:
            status, body = http_get(agent.url("/metrics"))
            self.assertEqual(status, 200)
            agent.stop()
        check = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True,
                               text=True, timeout=60)
        # promtool prints one line per lint problem; a clean exposition prints nothing.
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertEqual(check.stdout + check.stderr, "")


class PrometheusScrapeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kiln-prom-")
        self.prometheus = None

    def tearDown(self):
        if self.prometheus is not None and self.prometheus.poll() is None:
            self.prometheus.terminate()
            try:
                self.prometheus.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.prometheus.kill()
                self.prometheus.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def query(self, port, promql):
        url = (f"http://127.0.0.1:{port}/api/v1/query?" +
               urllib.parse.urlencode({"query": promql}))
        status, body = http_get(url)
        self.assertEqual(status, 200, body)
        reply = json.loads(body)
        self.assertEqual(reply["status"], "success", reply)
        return reply["data"]["result"]

    def test_prometheus_scrapes_the_agent(self):
        with Agent("--config", self.write_agent_config()) as agent:
            prom_port = free_port()
            config = os.path.join(self.tmp, "prometheus.yml")
            with open(config, "w") as f:
                f.write("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                        "scrape_configs:\n"
                        "  - job_name: kiln-agent\n"
                        f"    static_configs: [{{targets: ['127.0.0.1:{agent.port}']}}]\n")
            self.prometheus = subprocess.Popen(
                ["prometheus", f"--config.file={config}",
                 f"--storage.tsdb.path={os.path.join(self.tmp, 'data')}",
                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.tmp, "prom.log"), "w"))
            wait_until(lambda: http_get(f"http://127.0.0.1:{prom_port}/-/ready")[0] == 200
                       if self.prometheus.poll() is None else self.fail("prometheus exited"),
                       30, "Prometheus to be ready")
            # A new target is first scraped about 5-6 s after start.
            up = wait_until(lambda: self.query(prom_port, 'up{job="kiln-agent"} == 1'), 60,
                            "a successful scrape of the agent")
            self.assertEqual(up[0]["metric"]["instance"], f"127.0.0.1:{agent.port}")

            info = self.query(prom_port, "kiln_agent_info")
            self.assertEqual(len(info), 1)
            self.assertEqual(info[0]["metric"]["rack"], "r3")
            self.assertEqual(info[0]["metric"]["switch"], "s9")

            cpus = self.query(prom_port, "kiln_node_cpus")
            self.assertEqual(float(cpus[0]["value"][1]), float(os.cpu_count()))

            _, exposition = http_get(agent.url("/metrics"))
            commit_line = next(l for l in exposition.splitlines()
                               if l.startswith("kiln_build_info{"))
            build = self.query(prom_port, "kiln_build_info")
            self.assertIn(f'commit="{build[0]["metric"]["commit"]}"', commit_line)

            # The heartbeat counter moves, and Prometheus sees it move.
            wait_until(lambda: self.query(
                prom_port, 'increase(kiln_agent_heartbeats_total[10s]) > 0'), 30,
                "Prometheus to see heartbeats increase")
            self.assertEqual(agent.stop(), 0)

    def write_agent_config(self):
        path = os.path.join(self.tmp, "agent.yaml")
        with open(path, "w") as f:
            f.write("heartbeat_interval_ms: 100\nlabels: {rack: r3, switch: s9}\n")
        return path


if __name__ == "__main__":
    unittest.main()
