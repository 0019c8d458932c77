"""The coordinator's API and its durability with real processes and a real SQLite file (issue 12):

- kill -9 of the coordinator in the middle of a run, then a restart on the same state: the job's
  ranks never stop (one start each, no fault, attempt 0), and no accepted job, node state or event
  is lost, including a job whose 201 arrived just before the kill;
- bad specs (unknown key, wrong type, nodes > cluster size, no config) are refused naming the file,
  line and key; bad tokens get 401/403/404 with a message;
- least privilege: a team sees and changes only its own jobs, only an admin manages nodes, and
  every state-changing call is in the audit log;
- a secret env value appears nowhere: not in the coordinator's or agents' logs, events, API
  answers, or any TEXT column of the SQLite file.
"""
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_cluster import Cluster  # noqa: E402
from kiln_test import KILN_BIN, skip_unless_ci, wait_until  # noqa: E402

SLEEPER = """name: {name}
command: [/bin/sh, -c, "echo started; sleep {seconds}; echo done"]
nodes: {nodes}
env:
  PLAIN: visible
  API_KEY: {{value: {secret}, secret: true}}
"""
SECRET = "s3cr3t-VALUE-7f1d9"


def write(tmp, name, text):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def api(cluster, method, path, token, body=None):
    req = urllib.request.Request(cluster.url + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def pwd_uid(name):
    import pwd
    return pwd.getpwnam(name).pw_uid


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


class CoordinatorTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-coord-")
        self.addCleanup(self.tmp.cleanup)

    def test_kill9_of_the_coordinator_loses_nothing_and_stops_nothing(self):
        with Cluster() as cluster:
            long_job = cluster.submit(write(self.tmp.name, "long.yaml", SLEEPER.format(
                name="long", seconds=12, nodes=2, secret=SECRET)))
            # As the other tests' waits: under the full suite's load (the Slurm tests starting
            # beside it) this job was not yet running after 30 s.
            cluster.wait_state(long_job, "running", 120)

            def metrics_text():
                with urllib.request.urlopen(cluster.url + "/metrics", timeout=10) as r:
                    return r.read().decode()
            # The coordinator samples its figures on its tick (100 ms), after the state changed.
            metrics = wait_until(
                lambda: (lambda m: m if "kiln_job_submit_to_running_seconds_count 1" in m
                         else None)(metrics_text()), 10, "the submit-to-running sample")
            self.assertIn('kiln_jobs{state="running"} 1', metrics)
            self.assertIn('kiln_nodes{state="ready"} 4', metrics)
            self.assertIn("kiln_job_submit_to_running_seconds_count 1", metrics)
            self.assertIn('kiln_job_faults_total{cause="rank_exit"} 0', metrics)
            self.assertIn("kiln_fault_recovery_seconds_bucket", metrics)
            events_before = cluster.events(long_job)
            nodes_before = {n["name"]: n["state"] for n in cluster.node_list()}
            # A submit whose 201 arrived, then the kill at once.
            late = cluster.submit(write(self.tmp.name, "late.yaml", SLEEPER.format(
                name="late", seconds=1, nodes=1, secret=SECRET)))
            cluster.kill9()
            time.sleep(1)
            cluster.start(wait_nodes=False)
            self.assertEqual(cluster.status(long_job)["state"], "running")
            self.assertEqual(cluster.events(long_job)[:len(events_before)], events_before)
            nodes_after = {n["name"]: n["state"] for n in cluster.node_list()}
            self.assertEqual(nodes_after, nodes_before)
            final = cluster.wait_state(long_job, ["succeeded", "failed"], 60)
            self.assertEqual(final["state"], "succeeded", final)
            self.assertEqual(final["attempt"], 0)
            types = [e["type"] for e in cluster.events(long_job)]
            self.assertNotIn("fault", types)
            # Each rank started once: the restart did not stop or restart anything.
            starts = [r for r in cluster.agent_logs()
                      if r.get("msg") == "rank started" and r.get("job") == long_job]
            self.assertEqual(sorted(r["rank"] for r in starts), [0, 1])
            self.assertEqual(cluster.wait_state(late, ["succeeded", "failed"], 60)["state"],
                             "succeeded")

    def test_bad_specs_are_refused_naming_file_line_and_key(self):
        with Cluster() as cluster:
            cases = {
                "unknown.yaml": ("name: a\nconfig: c.yaml\nnodez: 2\n",
                                 ["unknown.yaml:3", "nodez", "did you mean"]),
                "type.yaml": ("name: a\nconfig: c.yaml\nnodes: two\n", ["type.yaml:3", "nodes"]),
                "big.yaml": ("name: a\nconfig: c.yaml\nnodes: 9\n",
                             ["needs 9 node(s)", "cluster has 4"]),
                "noconfig.yaml": ("name: a\nnodes: 1\n", ["noconfig.yaml", "config"]),
            }
            for name, (text, wanted) in cases.items():
                r = cluster.kiln("submit", write(self.tmp.name, name, text))
                self.assertEqual(r.returncode, 2, (name, r.stdout, r.stderr))
                for w in wanted:
                    self.assertIn(w, r.stderr, name)
            self.assertEqual(cluster.kiln_json("status"), [])  # nothing was stored

    def test_tokens_teams_and_audit(self):
        tokens = {"alice": "alice-token-1", "bob": "bob-token-2", "ops": "ops-token-3"}
        node_token = "node-token-4"
        lines = ["tokens:"]
        for name, token in tokens.items():
            team = "ops" if name == "ops" else name + "-team"
            admin = "true" if name == "ops" else "false"
            lines.append(f"  {name}: {{team: {team}, admin: {admin}, sha256: {sha(token)}}}")
        lines.append(f"node_token_sha256: {sha(node_token)}")
        auth = write(self.tmp.name, "auth.yaml", "\n".join(lines) + "\n")
        node_file = write(self.tmp.name, "node.token", node_token + "\n")
        with Cluster(extra=("--auth-file", auth, "--node-token-file", node_file),
                     token=tokens["ops"]) as cluster:
            spec = write(self.tmp.name, "a.yaml", SLEEPER.format(name="a", seconds=1, nodes=1,
                                                                 secret=SECRET))
            r = cluster.kiln("submit", spec, "--json", token=tokens["alice"])
            self.assertEqual(r.returncode, 0, r.stderr)
            job = json.loads(r.stdout)["id"]
            self.assertEqual(api(cluster, "GET", "/v1/jobs", None)[0], 401)
            status, body = api(cluster, "GET", "/v1/jobs", "wrong")
            self.assertEqual(status, 401)
            self.assertIn("unknown token", body)
            self.assertEqual(api(cluster, "GET", "/v1/jobs", node_token)[0], 403)
            # bob's team sees nothing of alice's job and cannot cancel it
            status, body = api(cluster, "GET", f"/v1/jobs/{job}", tokens["bob"])
            self.assertEqual(status, 404, body)
            self.assertEqual(
                api(cluster, "POST", f"/v1/jobs/{job}/cancel", tokens["bob"], {})[0], 404)
            self.assertEqual(
                json.loads(api(cluster, "GET", "/v1/jobs", tokens["bob"])[1])["jobs"], [])
            self.assertEqual(api(cluster, "GET", f"/v1/jobs/{job}", tokens["alice"])[0], 200)
            self.assertEqual(api(cluster, "GET", "/v1/jobs/j-999999", tokens["alice"])[0], 404)
            # only an admin manages nodes
            r = cluster.kiln("cordon", "local-1", "--reason", "x", token=tokens["alice"])
            self.assertEqual(r.returncode, 1)
            self.assertIn("admin", r.stderr)
            self.assertEqual(cluster.kiln("cordon", "local-1", "--reason", "disk",
                                          token=tokens["ops"]).returncode, 0)
            cluster.wait_state(job, "succeeded", 60)
            con = sqlite3.connect(os.path.join(cluster.state, "kiln.db"))
            audit = con.execute("SELECT who, action, object, result FROM audit").fetchall()
            con.close()
            self.assertIn(("alice (team alice-team)", "submit", job, "accepted: a"), audit)
            self.assertTrue(any(a[1] == "cordon" and a[0].startswith("alice") and
                                a[3].startswith("refused") for a in audit), audit)
            self.assertTrue(any(a[1] == "cordon" and a[0].startswith("ops") and
                                a[3].startswith("ok") for a in audit), audit)

    def test_one_teams_ranks_cannot_read_another_teams_checkpoints(self):
        if os.geteuid() != 0:
            skip_unless_ci(self, "running ranks as other Unix users needs root")
        # Two teams whose ranks run as two different Unix users Debian always has.
        users = {"alice": "daemon", "bob": "nobody"}
        tokens = {"alice": "alice-token-1", "bob": "bob-token-2"}
        node_token = "node-token-3"
        lines = ["tokens:"]
        for name, token in tokens.items():
            lines.append(f"  {name}: {{team: {name}-team, sha256: {sha(token)}}}")
        lines.append(f"node_token_sha256: {sha(node_token)}")
        lines.append("team_users:")
        for name, user in users.items():
            lines.append(f"  {name}-team: {user}")
        auth = write(self.tmp.name, "auth.yaml", "\n".join(lines) + "\n")
        node_file = write(self.tmp.name, "node.token", node_token + "\n")
        work = os.path.join(self.tmp.name, "work")
        os.makedirs(work)
        os.chmod(self.tmp.name, 0o755)
        os.chmod(work, 0o777)
        ckpt_a = os.path.join(work, "ckpt-a")
        job_a = write(work, "a.yaml", f"""name: writer
command: [/bin/sh, -c, 'id -un; echo weights > "$KILN_CHECKPOINT_DIR/step_1"']
nodes: 1
checkpoint: {{dir: {ckpt_a}}}
max_restarts: 0
""")
        job_b = write(work, "b.yaml", f"""name: reader
command: [/bin/sh, -c, 'id -un; cat {ckpt_a}/step_1']
nodes: 1
max_restarts: 0
""")
        with Cluster(extra=("--auth-file", auth, "--node-token-file", node_file),
                     token=tokens["alice"]) as cluster:
            a = json.loads(cluster.kiln("submit", job_a, "--json", cwd=work).stdout)["id"]
            self.assertEqual(cluster.wait_state(a, ["succeeded", "failed"], 60)["state"],
                             "succeeded")
            lines_a = [r["line"] for r in cluster.logs(a, 0)]
            self.assertEqual(lines_a[0], "daemon")
            st = os.stat(ckpt_a)
            self.assertEqual(st.st_uid, pwd_uid("daemon"))
            self.assertEqual(st.st_mode & 0o777, 0o700)
            r = cluster.kiln("submit", job_b, "--json", cwd=work, token=tokens["bob"])
            b = json.loads(r.stdout)["id"]
            self.assertEqual(cluster.kiln("status", a, token=tokens["bob"]).returncode, 2)
            cluster.token = tokens["bob"]  # the harness's calls from here are bob's
            final = cluster.wait_state(b, ["succeeded", "failed"], 60)
            self.assertEqual(final["state"], "failed")
            out = [r["line"] for r in
                   cluster.kiln_json("logs", b, "--rank", "0", token=tokens["bob"])]
            self.assertEqual(out[0], "nobody")
            self.assertTrue(any("Permission denied" in line for line in out), out)

    def make_cert(self, name):
        cert = os.path.join(self.tmp.name, f"{name}-cert.pem")
        key = os.path.join(self.tmp.name, f"{name}-key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1",
                        "-addext", "basicConstraints=critical,CA:TRUE"],
                       check=True, capture_output=True)
        return cert, key

    def test_the_api_over_tls_with_a_certificate_the_test_makes(self):
        cert, key = self.make_cert("server")
        other, _ = self.make_cert("other")
        with Cluster(extra=("--tls-cert", cert, "--tls-key", key), ca_cert=cert) as cluster:
            # The agents registered over TLS (Cluster waits for them), and clients use it.
            job = cluster.submit(write(self.tmp.name, "t.yaml", SLEEPER.format(
                name="tls", seconds=0, nodes=1, secret=SECRET)))
            self.assertEqual(cluster.wait_state(job, ["succeeded", "failed"], 60)["state"],
                             "succeeded")
            # Plain HTTP gets nothing, and a client that trusts another certificate refuses.
            plain = cluster.kiln("nodes", "--server", cluster.url.replace("https", "http"))
            self.assertNotEqual(plain.returncode, 0)
            env = cluster.env()
            env["KILN_CA_CERT"] = other
            untrusted = subprocess.run([KILN_BIN, "nodes"], capture_output=True, text=True,
                                       env=env, timeout=30)
            self.assertNotEqual(untrusted.returncode, 0)
            self.assertIn(cluster.url, untrusted.stderr)

    def test_a_secret_env_value_appears_nowhere(self):
        with Cluster() as cluster:
            job = cluster.submit(write(self.tmp.name, "s.yaml", SLEEPER.format(
                name="secretive", seconds=1, nodes=2, secret=SECRET)))
            cluster.wait_state(job, "succeeded", 60)
            answers = [cluster.kiln("status", job, "--json").stdout,
                       cluster.kiln("status").stdout,
                       cluster.kiln("events", job, "--json").stdout,
                       api(cluster, "GET", f"/v1/jobs/{job}", cluster.token)[1],
                       api(cluster, "GET", "/v1/jobs", cluster.token)[1]]
            for rank in (0, 1):
                answers.append(cluster.kiln("logs", job, "--rank", str(rank), "--json").stdout)
            for text in answers:
                self.assertNotIn(SECRET, text)
            self.assertIn("API_KEY", answers[3])  # the name is shown, the value is not
            for root, _, files in os.walk(cluster.tmp.name):
                for name in files:
                    path = os.path.join(root, name)
                    if name.endswith((".log", ".out", ".err", ".yaml")):
                        with open(path, errors="replace") as f:
                            self.assertNotIn(SECRET, f.read(), path)
            con = sqlite3.connect(os.path.join(cluster.state, "kiln.db"))
            tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            for table in tables:
                cols = [c[1] for c in con.execute(f"PRAGMA table_info({table})")]
                for col in cols:
                    for (value,) in con.execute(
                            f"SELECT {col} FROM {table} WHERE typeof({col}) = 'text'"):
                        self.assertNotIn(SECRET, value, f"{table}.{col}")
            con.close()


if __name__ == "__main__":
    unittest.main()
