"""A real local Slurm cluster for a test: scripts/slurm-local with a directory, namespace prefix,
subnet and ports of the test's own, so that nothing it starts can meet anything else's.

    with LocalSlurm(self, "sbatch", netns=False) as slurm:
        job = slurm.sbatch(["-N2", "--ntasks-per-node", "2", script, config])
        slurm.wait_job(job, {"COMPLETED"}, 300)

Clients (sbatch, squeue, scontrol) run where they reach slurmctld: in the controller's namespace
when the slurmd run in namespaces (`slurm.client(...)`). Every wait has a deadline. On exit the
cluster goes down (jobs cancelled first, every daemon stopped by its pid, namespaces deleted).
"""
import os
import re
import shutil
import subprocess
import tempfile
import time

from kiln_test import KILN_BIN, SOURCE_DIR, skip_unless_ci

SLURM_LOCAL = os.path.join(SOURCE_DIR, "scripts", "slurm-local")


def slurm_available(test):
    """Skips `test` (a failure in CI) when this machine cannot run a local Slurm cluster."""
    if os.geteuid() != 0:
        skip_unless_ci(test, "a local Slurm cluster needs root (munge, slurmd, namespaces)")
        return False
    for tool in ("slurmctld", "slurmd", "munged", "sbatch"):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            skip_unless_ci(test, f"{tool} is not installed (scripts/install-deps installs it)")
            return False
    return True


class LocalSlurm:
    def __init__(self, name, net_octet, netns=False, nodes=4, port_base=None):
        """`name`: a short tag (the namespace prefix, <= 6 letters); `net_octet`: the third octet of
        the private /24 10.77.<net_octet>.0 the test's hosts use; distinct per test."""
        self.dir = tempfile.mkdtemp(prefix=f"kiln-slurm-{name}-")
        self.netns = netns
        self.nodes = nodes
        self.prefix = f"ks{name}"[:8]
        self.net = f"10.77.{net_octet}"
        self.port_base = port_base or 20000 + 100 * net_octet
        self.env = dict(os.environ, KILN_SLURM_DIR=self.dir, KILN_SLURM_PREFIX=self.prefix,
                        KILN_SLURM_NET=self.net, KILN_SLURM_PORT_BASE=str(self.port_base),
                        KILN=KILN_BIN)
        self.conf = os.path.join(self.dir, "slurm.conf")

    def __enter__(self):
        args = [SLURM_LOCAL, "up", "--nodes", str(self.nodes)] + (["--netns"] if self.netns else [])
        r = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            self.close()
            raise AssertionError(f"scripts/slurm-local up failed:\n{r.stdout}\n{r.stderr}\n"
                                 f"{self.log_tail()}")
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        subprocess.run([SLURM_LOCAL, "down"], env=self.env, capture_output=True, timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, lines=30):
        out = []
        logdir = os.path.join(self.dir, "log")
        if os.path.isdir(logdir):
            for f in sorted(os.listdir(logdir)):
                with open(os.path.join(logdir, f), errors="replace") as fh:
                    tail = fh.read().splitlines()[-lines:]
                out.append(f"--- {f}\n" + "\n".join(tail))
        return "\n".join(out)

    # --- clients ---
    def client_argv(self, argv):
        """argv as run where slurmctld is reachable (scripts/slurm-local exec)."""
        return [SLURM_LOCAL, "exec", *argv]

    def client(self, argv, timeout=60, env=None, check=False, cwd=None):
        full_env = dict(self.env, SLURM_CONF=self.conf, **(env or {}))
        return subprocess.run(self.client_argv(argv), env=full_env, capture_output=True, text=True,
                              timeout=timeout, check=check, cwd=cwd)

    def sbatch(self, args, env=None, cwd=None):
        r = self.client(["sbatch", "--parsable", *args], env=env, cwd=cwd)
        if r.returncode != 0:
            raise AssertionError(f"sbatch {args} failed ({r.returncode}): {r.stderr}")
        return r.stdout.strip().split(";")[0]

    def job_info(self, job):
        """scontrol show job's fields as a dict ({} when Slurm does not know the job)."""
        r = self.client(["scontrol", "show", "job", "-o", str(job)], timeout=30)
        if r.returncode != 0:
            return {}
        return dict(re.findall(r"(\w+)=(\S*)", r.stdout))

    def wait_job(self, job, states, timeout_s, fail_states=()):
        """Waits until the job's JobState is one of `states`; returns its info."""
        deadline = time.monotonic() + timeout_s
        info = {}
        while time.monotonic() < deadline:
            info = self.job_info(job)
            state = info.get("JobState")
            if state in states:
                return info
            if state in fail_states:
                raise AssertionError(f"job {job} is {state}: {info}")
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout_s} s waiting for job {job} to be {states}; "
                             f"last: {info}\n{self.log_tail(10)}")

    def node_state(self, node):
        r = self.client(["sinfo", "-h", "-N", "-n", node, "-o", "%T|%E"], timeout=30)
        state, _, reason = r.stdout.strip().partition("|")
        return state, reason

    def host_index(self, node):
        return int(node.lstrip("n"))

    # --- links (netns only) ---
    def hosts_cli(self, *args):
        subprocess.run(["python3", os.path.join(SOURCE_DIR, "tests", "lib", "fakehosts.py"), *args,
                        "--prefix", self.prefix, "--net", self.net, "--hosts", str(self.nodes)],
                       check=True, capture_output=True, timeout=60)

    def cut(self, node):
        self.hosts_cli("cut", str(self.host_index(node)))

    def heal(self, node):
        self.hosts_cli("heal", str(self.host_index(node)))

    def host_exec(self, node, argv, timeout=30):
        ns = f"{self.prefix}h{self.host_index(node)}"
        return subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "--", *argv],
                              capture_output=True, text=True, timeout=timeout)
