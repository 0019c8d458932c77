"""Every alert of deploy/prometheus/rules.yml has a severity (warning or critical), a runbook
line, and unit tests in rules_test.yml where it fires and where it must not (promtool runs those: ctest
deploy.prometheus_rules). An alert added without a test, or without a runbook, fails here."""
import os
import sys
import unittest

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import SOURCE_DIR  # noqa: E402

DEPLOY = os.path.join(SOURCE_DIR, "deploy", "prometheus")


class RulesCoveredTest(unittest.TestCase):
    def test_every_alert_is_levelled_documented_and_fires_in_a_test(self):
        with open(os.path.join(DEPLOY, "rules.yml")) as f:
            rules = yaml.safe_load(f)
        with open(os.path.join(DEPLOY, "rules_test.yml")) as f:
            tests = yaml.safe_load(f)
        fired, quiet = set(), set()
        for case in tests["tests"]:
            for t in case.get("alert_rule_test", []):
                (fired if t.get("exp_alerts") else quiet).add(t["alertname"])
        alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
        self.assertGreaterEqual(len(alerts), 16)
        for rule in alerts:
            name = rule["alert"]
            self.assertIn(rule.get("labels", {}).get("severity"), ("warning", "critical"), name)
            self.assertTrue(rule.get("annotations", {}).get("runbook"), f"{name}: no runbook")
            self.assertIn(name, fired, f"{name}: no case in rules_test.yml where it fires")
            self.assertIn(name, quiet, f"{name}: no case in rules_test.yml where it must not")


if __name__ == "__main__":
    unittest.main()
