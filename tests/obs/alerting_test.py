"""Alerts delivered for real (issue 16): a coordinator running a real training job, a real
Prometheus evaluating deploy/prometheus/rules.yml against the coordinator's /metrics, a real
Alertmanager, and a webhook on loopback. A SIGSTOP of the job's rank stops its steps: the
KilnJobStalled alert reaches the webhook, critical, naming the job and carrying its runbook, before
the coordinator's own hang detection (progress_timeout) restarts the job.
"""
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_cluster import Cluster  # noqa: E402
from kiln_test import SOURCE_DIR, free_port, http_get, stop_processes, wait_until  # noqa: E402

RULES = os.path.join(SOURCE_DIR, "deploy", "prometheus", "rules.yml")
JOB = """name: stall-me
command: [kiln, train, configs/tiny.yaml, --threads, "1", --batch, "2", --seq, "64",
          --max-steps, "100000", --val-every, "0", --json]
nodes: 1
progress_timeout: 90s
max_restarts: 0
"""


class Webhook:
    """Alertmanager's webhook receiver: keeps every notification it is sent."""

    def __init__(self):
        self.received = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the http.server name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/alert"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def alerts(self, name):
        return [a for n in self.received for a in n.get("alerts", [])
                if a["labels"].get("alertname") == name]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class AlertDeliveryTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kiln-alerts-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.procs = []
        self.addCleanup(lambda: stop_processes(self.procs))

    def start(self, argv, name):
        out = open(os.path.join(self.tmp, name + ".log"), "w")
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        out.close()
        self.procs.append(proc)
        return proc

    def test_a_stopped_rank_pages_through_alertmanager(self):
        webhook = Webhook()
        self.addCleanup(webhook.close)
        cluster = Cluster(nodes=1)
        self.addCleanup(cluster.close)
        cluster.start()
        coordinator = urllib.parse.urlparse(cluster.url).netloc

        am_port = free_port()
        am_config = os.path.join(self.tmp, "am.yml")
        with open(am_config, "w") as f:
            f.write("route: {receiver: webhook, group_by: [alertname, job_id], group_wait: 0s,\n"
                    "        group_interval: 1s, repeat_interval: 1h}\n"
                    f"receivers:\n  - name: webhook\n    webhook_configs:\n"
                    f"      - {{url: '{webhook.url}', send_resolved: true}}\n")
        self.start(["prometheus-alertmanager", f"--config.file={am_config}",
                    f"--storage.path={os.path.join(self.tmp, 'am')}",
                    f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="],
                   "alertmanager")
        prom_port = free_port()
        prom_config = os.path.join(self.tmp, "prometheus.yml")
        with open(prom_config, "w") as f:
            # Scrapes of 2 s: one slow answer of a loaded host is not a gap that resets `for`.
            f.write("global: {scrape_interval: 2s, scrape_timeout: 2s, evaluation_interval: 1s}\n"
                    f"rule_files: ['{RULES}']\n"
                    f"alerting: {{alertmanagers: [{{static_configs: [{{targets: "
                    f"['127.0.0.1:{am_port}']}}]}}]}}\n"
                    "scrape_configs:\n"
                    "  - job_name: kiln-coordinator\n"
                    f"    static_configs: [{{targets: ['{coordinator}']}}]\n")
        self.start(["prometheus", f"--config.file={prom_config}",
                    f"--storage.tsdb.path={os.path.join(self.tmp, 'prom')}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                    "--rules.alert.resend-delay=1s"], "prometheus")
        wait_until(lambda: http_get(f"http://127.0.0.1:{prom_port}/-/ready")[0] == 200, 30,
                   "Prometheus to be ready")
        wait_until(lambda: http_get(f"http://127.0.0.1:{am_port}/-/ready")[0] == 200, 30,
                   "Alertmanager to be ready")

        spec = os.path.join(self.tmp, "job.yaml")
        with open(spec, "w") as f:
            f.write(JOB)
        job = cluster.submit(spec, cwd=SOURCE_DIR)
        # Steps are made and scraped: the job's progress series exist.
        def stepping():
            url = (f"http://127.0.0.1:{prom_port}/api/v1/query?" +
                   urllib.parse.urlencode({"query": f'kiln_job_step{{job_id="{job}"}} > 2'}))
            status, body = http_get(url)
            return status == 200 and json.loads(body)["data"]["result"]
        try:
            wait_until(stepping, 120, "the job's steps to reach Prometheus")
        except AssertionError:
            metrics = http_get(cluster.url + "/metrics")[1]
            targets = http_get(f"http://127.0.0.1:{prom_port}/api/v1/targets")[1]
            raise AssertionError(f"status {cluster.status(job)}\nmetrics "
                                 f"{[m for m in metrics.splitlines() if 'kiln_job' in m]}\n"
                                 f"targets {targets[:1500]}")
        self.assertEqual(webhook.alerts("KilnJobStalled"), [])

        pid, _ = cluster.rank_pid(job, 0, 0)
        os.kill(pid, signal.SIGSTOP)
        self.addCleanup(lambda: os.kill(pid, signal.SIGCONT) if os.path.exists(f"/proc/{pid}")
                        else None)
        stopped = time.monotonic()
        firing = wait_until(lambda: [a for a in webhook.alerts("KilnJobStalled")
                                     if a["status"] == "firing"], 80,
                            "KilnJobStalled to reach the webhook")
        delay = time.monotonic() - stopped
        print(f"KilnJobStalled reached the webhook {delay:.1f} s after the SIGSTOP", file=sys.stderr)
        alert = firing[0]
        self.assertEqual(alert["labels"]["job_id"], job)
        self.assertEqual(alert["labels"]["severity"], "critical")
        self.assertIn("kiln status JOB", alert["annotations"]["runbook"])
        self.assertRegex(alert["annotations"]["summary"], f"job {job} made no step for ")
        # Before the coordinator's own verdict: the job is still running, not yet restarted.
        self.assertLess(delay, 90, delay)
        self.assertEqual(cluster.status(job)["state"], "running")
        os.kill(pid, signal.SIGCONT)
        cluster.kiln("cancel", job)


if __name__ == "__main__":
    unittest.main()
