"""The dashboard page in a real browser (issue 16): headless Chromium, driven through ChromeDriver
by Selenium, loads /ui/ from a coordinator running a real two-node training job. It logs in with
the token, finds the job in the jobs table and the nodes in the cluster tiles, opens the job and
checks that every curve is drawn with points from the job (as many as the API serves); then one
rank is killed with SIGKILL, and once the job has restarted the page marks the fault on every
curve, lists it among the events and shows its error signature. No console errors throughout. The
screenshots are saved under the build folder (ui-screenshots/).
"""
import json
import os
import signal
import sys
import tempfile
import time
import unittest
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_cluster import Cluster  # noqa: E402
from kiln_test import KILN_BIN, SOURCE_DIR, wait_until  # noqa: E402

JOB = """name: page
command: [kiln, train, configs/tiny.yaml, --threads, "1", --batch, "2", --seq, "64",
          --max-steps, "400", --val-every, "10", --json]
nodes: 2
checkpoint: {{dir: {ckpt}, every: 10}}
max_restarts: 2
restart_backoff: 1s
progress_timeout: 60s
"""
SHOTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(KILN_BIN))), "ui-screenshots")


def api(cluster, path):
    req = urllib.request.Request(cluster.url + path,
                                 headers={"Authorization": "Bearer " + cluster.token})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def browser(profile):
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    options.add_argument("--user-data-dir=" + profile)  # the test's: removed with its tmp
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1400",
                "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Chromium's own temporary files (its singleton sockets) go under the profile too.
    os.makedirs(profile, exist_ok=True)
    service = Service("/usr/bin/chromedriver", env=dict(os.environ, TMPDIR=profile))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    return driver


class PageTest(unittest.TestCase):
    def setUp(self):
        self.console = []

    def wait_ready(self, driver, what, timeout_s=30):
        wait_until(lambda: driver.execute_script(
            "return !!(window.kilnPage && window.kilnPage.ready)"), timeout_s, what)

    def take_console(self, driver):
        for entry in driver.get_log("browser"):
            self.console.append(entry)

    def chart_attrs(self, driver):
        out = {}
        for el in driver.find_elements(By.CSS_SELECTOR, ".chart[data-chart]"):
            out[el.get_attribute("data-chart")] = (int(el.get_attribute("data-points") or 0),
                                                   int(el.get_attribute("data-faults") or 0))
        return out

    def test_the_page_draws_the_jobs_curves_and_marks_a_fault(self):
        os.makedirs(SHOTS, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="kiln-page-") as tmp, \
                Cluster(nodes=2, slots=1) as cluster:
            spec = os.path.join(tmp, "job.yaml")
            with open(spec, "w") as f:
                f.write(JOB.format(ckpt=os.path.join(tmp, "ckpt")))
            job = cluster.submit(spec, cwd=SOURCE_DIR)
            # Enough steps for curves, and a checkpoint to restart from.
            wait_until(lambda: api(cluster, f"/v1/jobs/{job}/steps")["count"] >= 25, 180,
                       "25 step points of the job")
            driver = browser(os.path.join(tmp, "chromium"))
            try:
                # The page holds no data until a token is given; a wrong one is refused.
                driver.get(cluster.url + "/ui")
                driver.find_element(By.ID, "token").send_keys("not-a-token")
                driver.find_element(By.ID, "login").click()
                wait_until(lambda: driver.find_element(By.ID, "login-error").text.strip(), 10,
                           "the login error")
                driver.get_log("browser")  # the 401 of the wrong token is expected there
                token = driver.find_element(By.ID, "token")
                token.clear()
                token.send_keys(cluster.token)
                driver.find_element(By.ID, "login").click()
                self.wait_ready(driver, "the overview")
                rows = driver.find_elements(By.CSS_SELECTOR, f'#jobs-body tr[data-job="{job}"]')
                self.assertEqual(len(rows), 1, "the job's row in the jobs table")
                self.assertEqual(len(driver.find_elements(By.CSS_SELECTOR, ".node[data-node]")), 2)
                driver.save_screenshot(os.path.join(SHOTS, "overview.png"))

                driver.get(cluster.url + f"/ui/#/job/{job}")
                self.wait_ready(driver, "the job page")
                steps = api(cluster, f"/v1/jobs/{job}/steps?max=4000")
                losses = [v for v in steps["columns"]["loss"] if v is not None]
                attrs = self.chart_attrs(driver)
                self.assertEqual(set(attrs), {"loss", "lr", "throughput", "steptime"}, attrs)
                for name, (points, _) in attrs.items():
                    # The page read the job a moment before the API answered here.
                    self.assertGreaterEqual(points, 20, f"{name}: {attrs}")
                    self.assertLessEqual(points, len(losses), f"{name}: {attrs}")
                self.assertEqual(len(driver.find_elements(By.CSS_SELECTOR, "#ranks .rank")), 2)
                before = attrs["loss"][0]
                self.take_console(driver)

                # A rank dies; the coordinator restarts the job from its checkpoint.
                pid, node = cluster.rank_pid(job, 0, 1)
                os.kill(pid, signal.SIGKILL)
                wait_until(lambda: cluster.status(job)["attempt"] >= 1
                           and cluster.status(job)["state"] == "running", 120, "the restart")
                wait_until(lambda: any(a == 1 for a in api(
                    cluster, f"/v1/jobs/{job}/steps")["columns"]["attempt"]), 120,
                    "steps of the second attempt")
                # The page refreshes by itself (every 5 s).
                wait_until(lambda: all(f >= 1 for _, f in self.chart_attrs(driver).values()), 30,
                           "a fault marker on every chart")
                wait_until(lambda: self.chart_attrs(driver)["loss"][0] > before + 5, 60,
                           "the second attempt's steps on the curves")
                events = driver.find_elements(By.CSS_SELECTOR, "#events li.event-fault")
                self.assertGreaterEqual(len(events), 1)
                signatures = [el.text for el in
                              driver.find_elements(By.CSS_SELECTOR, "#signatures li.signature")]
                # rank 1 killed, or rank 0's collective blaming it: which report came first.
                self.assertTrue(any(f"rank 1 on {node} killed by signal 9" in s
                                    or f"(rank 1 on {node})" in s for s in signatures), signatures)
                time.sleep(1)
                driver.save_screenshot(os.path.join(SHOTS, "job.png"))
                print(f"screenshots: {SHOTS}/overview.png, job.png; charts {self.chart_attrs(driver)}",
                      file=sys.stderr)
                self.take_console(driver)
            finally:
                driver.quit()
            errors = [e for e in self.console if e.get("level") == "SEVERE"]
            self.assertEqual(errors, [], "console errors")
            cluster.kiln("cancel", job)


if __name__ == "__main__":
    unittest.main()
