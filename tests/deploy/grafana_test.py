"""deploy/grafana/kiln.json, the Grafana dashboard, queries only what Kiln really exposes.

The static half reads the dashboard: it is one Grafana can import (title, uid, schemaVersion,
unique panel ids, every panel on the `${datasource}` variable, every panel with a query), and
each PromQL expression parses (promtool) and names only known functions and keywords, so the
metric names can be taken from it. The live half starts what a user runs: `kiln serve
--local-nodes 2` and a real two-rank training job with a checkpoint directory, rank 0 serving its own
/metrics (`kiln train --metrics-port`). Every metric the dashboard names must appear in the
exposition of the coordinator, an agent or the rank, as the sample name itself (a histogram is
queried as NAME_bucket, NAME_sum or NAME_count; prometheus-cpp exposes a counter under the name
it was registered with, `_total` included); rate() and increase() only over counters and
histogram samples; a series joined with kiln_job_info on(job_id) must carry job_id. Then a real
Prometheus scrapes the same endpoints and every panel's query returns data.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_cluster import Cluster  # noqa: E402
from kiln_test import SOURCE_DIR, free_port, http_get, stop_processes, wait_until  # noqa: E402

DASHBOARD = os.path.join(SOURCE_DIR, "deploy", "grafana", "kiln.json")
DATASOURCE = "${datasource}"

# PromQL as of Prometheus 2.42 (Debian 12's), the parts a dashboard may use.
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg",
    "delta", "deriv", "exp", "floor", "histogram_count", "histogram_fraction",
    "histogram_quantile", "histogram_sum", "holt_winters", "hour", "idelta", "increase", "irate",
    "label_join", "label_replace", "last_over_time", "ln", "log10", "log2", "max_over_time",
    "min_over_time", "minute", "month", "pi", "predict_linear", "present_over_time",
    "quantile_over_time", "rad", "rate", "resets", "round", "scalar", "sgn", "sin", "sinh", "sort",
    "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh",
    "time", "timestamp", "vector", "year",
}
AGGREGATIONS = {"avg", "bottomk", "count", "count_values", "group", "max", "min", "quantile",
                "stddev", "stdvar", "sum", "topk"}
KEYWORDS = {"and", "or", "unless", "atan2", "bool", "by", "without", "on", "ignoring",
            "group_left", "group_right", "offset", "inf", "nan"}
# Where metric names start. Kiln's own, and the standard process_* series every Kiln registry
# exports (src/obs/process_collector.cc): both are checked against the live exposition.
METRIC_PREFIXES = ("kiln_", "process_")
# Series Prometheus makes itself for each target: in no exposition, so not checked live.
PROMETHEUS_SERIES = {"up"}
# Grafana's built-in variables, at values that suit this test's 1 s scrapes. The dashboard's
# own template variables ($job_id, $instance) become ".*", their "All" (substitute()).
BUILTIN_VARIABLES = {"__rate_interval": "30s", "__interval": "30s", "__range": "1h"}

IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
DURATION = re.compile(r"(?<![\w:.])(?:\d+(?:ms|s|m|h|d|w|y))+(?![\w:])")
NUMBER = re.compile(r"(?<![\w:.])(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
                    r"(?![\w:])")
RATE_ARG = re.compile(r"\b(rate|irate|increase|resets)\s*\(\s*([A-Za-z_:][A-Za-z0-9_:]*)")


def promql_metric_names(expr):
    """The metric names `expr` selects. Raises ValueError for anything that is neither a known
    function, aggregation or keyword nor a metric name of Kiln's (METRIC_PREFIXES) or
    Prometheus's (PROMETHEUS_SERIES), and for text left over that is not an operator.

    Label matchers ({...}), ranges and subqueries ([...]), label lists (by (...), on (...),
    group_left (...)), strings, numbers and durations are removed first; what is left is
    identifiers, parentheses, commas and operators. An identifier followed by `(` is a function
    or aggregation; one followed by `by`/`without` is an aggregation; any other is a keyword
    or a metric. A keyword may stand anywhere: PromQL's parser (promtool, in the test below)
    judges the syntax; this only has to know which words are metrics."""
    s = VARIABLE.sub(" 0 ", expr)
    s = STRING.sub(" ", s)
    s = re.sub(r"\{[^{}]*\}", " ", s)
    s = re.sub(r"\[[^\[\]]*\]", " ", s)
    s = LABEL_LIST.sub(r" \1 ", s)
    s = DURATION.sub(" ", s)
    s = NUMBER.sub(" ", s)
    names = set()
    for m in IDENT.finditer(s):
        word = m.group(0)
        rest = s[m.end():].lstrip()
        if word in KEYWORDS:  # `by`, `on`... stand before `(` too once their labels are gone
            pass
        elif rest.startswith("("):
            if word not in FUNCTIONS and word not in AGGREGATIONS:
                raise ValueError(f"{expr!r}: {word}() is no PromQL function or aggregation")
        elif word in AGGREGATIONS and re.match(r"(by|without)\b", rest):
            pass
        elif word in FUNCTIONS or word in AGGREGATIONS:
            raise ValueError(f"{expr!r}: {word} is a function, not called")
        elif word.startswith(METRIC_PREFIXES) or word in PROMETHEUS_SERIES:
            names.add(word)
        else:
            raise ValueError(f"{expr!r}: {word} is no Kiln metric (kiln_*, process_*), "
                             f"Prometheus series ({sorted(PROMETHEUS_SERIES)}) or PromQL keyword")
    leftover = IDENT.sub(" ", s)
    if not re.fullmatch(r"[\s()+\-*/%^=!<>,]*", leftover):
        raise ValueError(f"{expr!r}: cannot read {leftover.strip()!r}")
    return names


def rated_names(expr):
    """Metric names that rate(), irate(), increase() or resets() is applied to."""
    s = STRING.sub(" ", VARIABLE.sub(" 0 ", expr))
    return {m.group(2) for m in RATE_ARG.finditer(s)}


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def all_panels(dashboard):
    """Every panel, those inside collapsed rows included."""
    out = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def queries(dashboard):
    """[(where, expr)]: every panel target's expr and every query variable's query. A variable's
    label_values(METRIC, label) becomes the selector METRIC."""
    out = []
    for p in all_panels(dashboard):
        for t in p.get("targets", []):
            out.append((f"panel {p['id']} {p.get('title')!r} target {t.get('refId')}",
                        t.get("expr", "")))
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"\s*label_values\(\s*(.+?)\s*,\s*\w+\s*\)\s*", q)
        out.append((f"variable {v['name']}", m.group(1) if m else q))
    return out


def variable_names(dashboard):
    return {v["name"] for v in dashboard.get("templating", {}).get("list", [])}


def substitute(expr, variables):
    """`expr` as Grafana would send it with every template variable at "All" (.*)."""
    def value(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in BUILTIN_VARIABLES:
            return BUILTIN_VARIABLES[name]
        if name in variables:
            return ".*"
        raise ValueError(f"{expr!r}: ${name} is no variable of the dashboard")
    return VARIABLE.sub(value, expr)


def exposition(text):
    """({sample name: [label dicts]}, {family: type}) of a text exposition (format 0.0.4)."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            types[name] = kind.strip()
        elif line and not line.startswith("#"):
            m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s", line)
            if m:
                labels = dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                         m.group(3) or ""))
                samples.setdefault(m.group(1), []).append(labels)
    return samples, types


def is_rateable(name, types):
    """Whether `name` is a counter's sample or a histogram's _bucket, _sum or _count."""
    if types.get(name) == "counter":
        return True
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and types.get(name[:-len(suffix)]) == "histogram":
            return True
    return False


class TokenizerTest(unittest.TestCase):
    """The name extraction itself, on expressions whose answer is known."""

    def test_names_come_from_metric_positions_only(self):
        self.assertEqual(
            promql_metric_names('histogram_quantile(0.9, sum by (le, instance) '
                                '(rate(kiln_a_bucket{x=~"$v",rate="1"}[$__rate_interval])))'),
            {"kiln_a_bucket"})
        self.assertEqual(
            promql_metric_names('kiln_b / on(job_id) group_left quantile by (job_id) (0.5, kiln_c)'
                                ' * on(job_id) group_left(name, team) kiln_job_info'),
            {"kiln_b", "kiln_c", "kiln_job_info"})
        self.assertEqual(promql_metric_names('count(up{job=~"kiln-.*"} == 0) or vector(0)'), {"up"})
        self.assertEqual(promql_metric_names("time() - kiln_d offset 1h30m > 1e-3"), {"kiln_d"})

    def test_unknown_names_and_functions_fail(self):
        for bad in ("node_load1", "sum(kiln_a) + foo", "ratez(kiln_a[5m])", "kiln_a @ 100",
                    "sum"):
            with self.assertRaises(ValueError, msg=bad):
                promql_metric_names(bad)

    def test_rated_names(self):
        self.assertEqual(rated_names("rate(kiln_a_sum[5m]) / increase(kiln_b_total[1h])"),
                         {"kiln_a_sum", "kiln_b_total"})


class DashboardStaticTest(unittest.TestCase):
    def setUp(self):
        self.dashboard = load_dashboard()

    def test_it_is_an_importable_dashboard(self):
        d = self.dashboard
        self.assertEqual(d["title"], "Kiln")
        self.assertRegex(d["uid"], r"^[a-zA-Z0-9_-]{1,40}$")
        self.assertGreaterEqual(d["schemaVersion"], 36)
        self.assertIsNone(d.get("id"), "an exported dashboard has no database id")
        variables = {v["name"]: v for v in d["templating"]["list"]}
        self.assertEqual(variables["datasource"]["type"], "datasource")
        self.assertEqual(variables["datasource"]["query"], "prometheus")
        job = variables["job_id"]
        self.assertEqual(job["type"], "query")
        self.assertEqual(job["query"]["query"], "label_values(kiln_job_info, job_id)")
        self.assertEqual(job["datasource"]["uid"], DATASOURCE)
        panels = all_panels(d)
        ids = [p["id"] for p in panels]
        self.assertEqual(len(ids), len(set(ids)), f"panel ids repeat: {sorted(ids)}")
        for p in panels:
            where = f"panel {p['id']} {p.get('title')!r}"
            self.assertTrue(p.get("title"), where)
            for key in ("h", "w", "x", "y"):
                self.assertIsInstance(p["gridPos"][key], int, where)
            self.assertLessEqual(p["gridPos"]["x"] + p["gridPos"]["w"], 24, where)
            if p["type"] == "row":
                continue
            self.assertIn(p["type"], ("timeseries", "stat", "table"), where)
            self.assertEqual(p["datasource"], {"type": "prometheus", "uid": DATASOURCE}, where)
            targets = p.get("targets", [])
            self.assertTrue(targets, f"{where}: no query")
            ref_ids = [t["refId"] for t in targets]
            self.assertEqual(len(ref_ids), len(set(ref_ids)), where)
            for t in targets:
                self.assertTrue(t.get("expr", "").strip(), f"{where}: target without expr")
                self.assertEqual(t.get("datasource", p["datasource"]), p["datasource"], where)
        # No two panels overlap on the grid.
        cells = {}
        for p in panels:
            g = p["gridPos"]
            for y in range(g["y"], g["y"] + g["h"]):
                for x in range(g["x"], g["x"] + g["w"]):
                    self.assertNotIn((x, y), cells, f"panels {cells.get((x, y))} and {p['id']}")
                    cells[(x, y)] = p["id"]

    def test_every_query_names_only_known_functions_and_metrics(self):
        names = set()
        for where, expr in queries(self.dashboard):
            try:
                found = promql_metric_names(expr)
                substitute(expr, variable_names(self.dashboard))
            except ValueError as e:
                self.fail(f"{where}: {e}")
            self.assertTrue(found, f"{where}: {expr!r} selects no metric")
            names |= found
        print(f"\nthe dashboard queries {len(names)} metrics: {' '.join(sorted(names))}",
              file=sys.stderr)

    def test_every_query_parses(self):
        """promtool parses each expression as a recording rule: a syntax error, or a join that
        cannot be valid (group_left without on, say), fails here."""
        variables = variable_names(self.dashboard)
        exprs = sorted({substitute(expr, variables) for where, expr in queries(self.dashboard)
                        if not where.startswith("variable")})
        rules = {"groups": [{"name": "grafana", "rules": [
            {"record": f"kiln:grafana_check_{i}", "expr": e} for i, e in enumerate(exprs)]}]}
        with tempfile.TemporaryDirectory(prefix="kiln-grafana-") as tmp:
            path = os.path.join(tmp, "rules.yml")
            with open(path, "w") as f:
                json.dump(rules, f)  # JSON is YAML
            r = subprocess.run(["promtool", "check", "rules", path], capture_output=True,
                               text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


# Checkpointed, so that rank 0 has its checkpointer and the kiln_ckpt_* series (registered when
# it starts), but rarely: each checkpoint of the tiny model is 360 MB to write.
JOB = """name: grafana
command: [kiln, train, configs/tiny.yaml, --threads, "1", --batch, "2", --seq, "64",
          --max-steps, "100000", --val-every, "0", --json, --metrics-port, "{port}"]
nodes: 2
ranks_per_node: 1
checkpoint: {{dir: {ckpt}, every: 1000}}
progress_timeout: 120s
max_restarts: 0
"""


class DashboardLiveTest(unittest.TestCase):
    """One cluster, one job and one Prometheus for both tests."""

    @classmethod
    def setUpClass(cls):
        cls.started = time.monotonic()
        cls.tmp = tempfile.mkdtemp(prefix="kiln-grafana-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.procs = []
        cls.addClassCleanup(lambda: stop_processes(cls.procs))
        cls.cluster = Cluster(nodes=2, slots=1)
        cls.addClassCleanup(cls.cluster.close)
        cls.cluster.start()
        cls.rank_port = free_port()
        spec = os.path.join(cls.tmp, "job.yaml")
        with open(spec, "w") as f:
            f.write(JOB.format(port=cls.rank_port, ckpt=os.path.join(cls.tmp, "ckpt")))
        cls.job = cls.cluster.submit(spec, cwd=SOURCE_DIR)
        cls.addClassCleanup(lambda: cls.cluster.kiln("cancel", cls.job))

        def agent_addresses():  # each local agent logs the port it picked (--metrics-port 0)
            ports = [r["port"] for r in cls.cluster.agent_logs() if r.get("msg") == "agent serving"]
            return [f"127.0.0.1:{p}" for p in ports] if len(ports) == 2 else None
        agents = wait_until(agent_addresses, 30, "both agents' metrics ports in their logs")
        coordinator = urllib.parse.urlparse(cls.cluster.url).netloc
        cls.targets = {"kiln-coordinator": [coordinator], "kiln-agent": agents,
                       "kiln-rank": [f"127.0.0.1:{cls.rank_port}"]}
        cls.prom_port = cls.start_prometheus()

        # The job is stepping: the series that exist only then are there.
        def ready():
            coord = http_get(cls.cluster.url + "/metrics")[1]
            rank = http_get(f"http://127.0.0.1:{cls.rank_port}/metrics")[1]
            return (len(re.findall(rf'^kiln_rank_compute_seconds{{job_id="{cls.job}"',
                                   coord, re.M)) == 2
                    and f'kiln_job_loss{{job_id="{cls.job}"}}' in coord
                    and "kiln_ckpt_save_requests_total" in rank)
        try:
            wait_until(ready, 90, "the job's first steps")
        except AssertionError:
            raise AssertionError(f"status {cls.cluster.status(cls.job)}\n"
                                 f"serve.err {cls.cluster.serve_errors()[-2000:]}")
        cls.expositions = {}
        for job, addresses in cls.targets.items():
            for address in addresses:
                status, body = http_get(f"http://{address}/metrics")
                assert status == 200, (job, address, status, body)
                cls.expositions[f"{job} {address}"] = exposition(body)

    @classmethod
    def start_prometheus(cls):
        port = free_port()
        config = os.path.join(cls.tmp, "prometheus.yml")
        with open(config, "w") as f:
            # The scrape jobs are named as in deploy/prometheus/prometheus.yml.
            f.write("global: {scrape_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n")
            for job, addresses in cls.targets.items():
                f.write(f"  - job_name: {job}\n    static_configs: [{{targets: {addresses}}}]\n")
        out = open(os.path.join(cls.tmp, "prometheus.log"), "w")
        cls.procs.append(subprocess.Popen(
            ["prometheus", f"--config.file={config}",
             f"--storage.tsdb.path={os.path.join(cls.tmp, 'prom')}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        out.close()
        wait_until(lambda: http_get(f"http://127.0.0.1:{port}/-/ready")[0] == 200, 30,
                   "Prometheus to be ready")
        return port

    def query(self, expr):
        url = (f"http://127.0.0.1:{self.prom_port}/api/v1/query?" +
               urllib.parse.urlencode({"query": expr}))
        status, body = http_get(url)
        return status, json.loads(body) if body.startswith("{") else body

    def test_every_queried_metric_is_exposed(self):
        dashboard = load_dashboard()
        scraped, types = {}, {}
        for where, (samples, kinds) in self.expositions.items():
            for name, labels in samples.items():
                scraped.setdefault(name, []).extend(labels)
            types.update(kinds)
        problems = []
        queried = set()
        for where, expr in queries(dashboard):
            names = promql_metric_names(expr) - PROMETHEUS_SERIES
            queried |= names
            for name in sorted(names):
                if name not in scraped:
                    problems.append(f"{where}: {name} is in no exposition")
                elif "on(job_id)" in expr.replace(" ", "") and any(
                        "job_id" not in labels for labels in scraped[name]):
                    problems.append(f"{where}: {name} is joined on job_id but has no job_id")
            for name in sorted(rated_names(expr) & set(scraped)):
                if not is_rateable(name, types):
                    problems.append(f"{where}: rate/increase over {name}, a "
                                    f"{types.get(name, 'sample of no counter or histogram')}")
        if problems:
            self.fail("\n".join(problems) + "\n\nqueried: " + " ".join(sorted(queried)) +
                      "\n\nscraped:\n" + "\n".join(
                          f"  {where}: {' '.join(sorted(samples))}"
                          for where, (samples, _) in sorted(self.expositions.items())))
        unused = sorted(n for n in set(scraped) - queried if n.startswith("kiln_"))
        print(f"\n{len(queried)} metrics queried, all exposed; Kiln samples not on the "
              f"dashboard: {' '.join(unused)}", file=sys.stderr)

    def test_every_panel_query_returns_data_from_prometheus(self):
        dashboard = load_dashboard()
        variables = variable_names(dashboard)
        # Every target scraped a few times, so that rate() has its two samples.
        wait_until(lambda: (lambda r: r[0] == 200 and len(r[1]["data"]["result"]) == 4)(
            self.query('count_over_time(up[1m]) >= 3 and up == 1')), 30,
            "Prometheus to scrape all four targets three times")
        pending = {e: w for w, e in queries(dashboard)}
        results = {}

        def all_answered():
            for expr in list(pending):
                status, body = self.query(substitute(expr, variables))
                if status != 200:
                    results[expr] = f"HTTP {status}: {body}"
                    continue
                series = body["data"]["result"]
                results[expr] = series
                if series:
                    del pending[expr]
            return not pending
        try:
            wait_until(all_answered, 20, "every query to return data")
        except AssertionError:
            self.fail("queries without data from a Prometheus scraping the coordinator, both "
                      "agents and rank 0:\n" + "\n".join(
                          f"  {pending[e]}: {e}\n    -> {results.get(e)}" for e in pending))
        print(f"\n{len(results)} queries answered; the live checks took "
              f"{time.monotonic() - self.started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
