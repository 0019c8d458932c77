"""What the benchmark drivers that put Kiln beside PyTorch share (bench/ops/run, bench/train/run).

  - Child processes: each runs in its own session with a deadline, is killed with its process
    group when it passes it (or an RSS cap), and is reaped with wait4, so its own peak RSS and
    CPU time come back with it (run_child).
  - Quietness: other users' share of the CPUs, sampled before a run (wait_for_quiet) and
    accounted over a stretch (CpuAccount: /proc/stat busy time less our children's rusage);
    a run during which others took more than BUSY_WARN_FRACTION is rerun (run_quietly).
  - The tuned torch environment, "PyTorch as an expert runs it on a CPU": Debian's OpenMP build
    of the system's OpenBLAS (the library Kiln links), unpacked into
    build/bench-ops/openblas-openmp/ and put first on the torch process's LD_LIBRARY_PATH, and
    tcmalloc through LD_PRELOAD (prepare_openmp_openblas, tcmalloc_path, torch_env); a torch
    process reports what it mapped (blas_facts) and check_torch_libraries rejects a run that
    loaded the wrong libraries.
  - The sgemm peak: bench/ops/sgemm_peak.cc built like Kiln (pkg-config openblas) into
    build/bench-ops/sgemm_peak and run on 1 and 2 threads (sgemm_peaks), kept best-of over
    quiet attempts (best_peaks_quietly).
  - Interleaving: repeats outermost, the order of the sides reversed on every other repeat
    (interleaved), so every side sees the machine's fast and slow spells alike.

Plain Python 3, no torch import: the drivers run without torch; torch processes import this
module for blas_facts only. Everything blocking has a timeout.
"""
import glob
import json
import os
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import machine  # bench/lib/machine.py, beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Shared by every driver: the harness binaries and the unpacked OpenMP OpenBLAS live here.
BUILD = os.path.join(ROOT, "build", "bench-ops")
# Debian's python3-torch is built for Debian's python; the drivers run torch with it.
TORCH_PYTHON = "/usr/bin/python3"

BUILD_TIMEOUT_S = 300  # one compile takes 2-5 s here
DOWNLOAD_TIMEOUT_S = 300  # apt-get download of a 6.7 MB package: seconds from the mirror
PROBE_TIMEOUT_S = 30  # `kiln --help`, dpkg-query, pkg-config: milliseconds
KILL_GRACE_S = 2  # between SIGTERM and SIGKILL for a timed-out child
POLL_S = 0.1  # how often a timed run's child is looked at: 10 wakeups a second cost nothing
# Runs with an RSS cap poll faster: an allocation of a few GiB takes a few hundred ms.
MEMORY_POLL_S = 0.02
BUSY_SAMPLE_S = 1.0  # other users' CPU share, sampled before a run
# Above this a run counts as noisy: a benchmark sharing its 2 vCPUs runs up to 2x slower.
BUSY_WARN_FRACTION = 0.25
NOISY_WAIT_S = 30  # how long a noisy run's rerun waits for quiet first
STDERR_TAIL_CHARS = 600  # how much of a failed child's stderr goes into a report
KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

CXXFLAGS = ["-std=c++20", "-O3", "-march=native", "-Wall", "-Wextra", "-Werror", "-Wshadow",
            "-Wnon-virtual-dtor", "-Wimplicit-fallthrough", "-Wformat=2", "-Wundef"]
SGEMM_SRC = os.path.join(ROOT, "bench", "ops", "sgemm_peak.cc")
SGEMM_BIN = os.path.join(BUILD, "sgemm_peak")
SGEMM_SIZE = 2048  # M = N = K: large enough for OpenBLAS's best kernel, 1-2 s on 1 thread
SGEMM_REPS = 5  # best of 5, after one warmup
SGEMM_TIMEOUT_S = 300  # about 10 s of work; five minutes is "hung"

# The tuned environment. The OpenMP OpenBLAS is the same upstream version and Debian revision
# as the system's pthread one (the package Kiln links), unpacked, never installed: the system's
# BLAS alternatives stay as they are.
OPENBLAS_SYSTEM_PACKAGE = "libopenblas0-pthread"
OPENBLAS_OPENMP_PACKAGE = "libopenblas0-openmp"
OPENBLAS_OPENMP_DIR = os.path.join(BUILD, "openblas-openmp")
OPENBLAS_OPENMP_STAMP = os.path.join(OPENBLAS_OPENMP_DIR, "version")
TCMALLOC_GLOB = "/usr/lib/*/libtcmalloc_minimal.so.4"  # Debian's libtcmalloc-minimal4


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def rel(path):
    """Relative to the repository root when inside it."""
    r = os.path.relpath(path, ROOT)
    return path if r.startswith("..") else r


def tail(text):
    """The end of a child's output on one line, so that it fits a Markdown list item."""
    text = " / ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return text if len(text) <= STDERR_TAIL_CHARS else "..." + text[-STDERR_TAIL_CHARS:]


def fmt(value, digits=1):
    return "n/a" if value is None else f"{value:.{digits}f}"


def size_text(nbytes):
    if nbytes >= GIB:
        return f"{nbytes / GIB:.2f} GiB"
    return f"{nbytes / MIB:.0f} MiB"


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


# ---------------------------------------------------------------------------------------------
# Child processes: each runs in its own session (so its process group is its own), has a
# deadline, and is reaped with wait4 so that its own peak RSS comes back with it.

def mem_available_kib():
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    raise OSError("/proc/meminfo has no MemAvailable")


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def run_child(argv, timeout_s, env=None, rss_cap_kib=None, poll_s=POLL_S, account=None,
              cwd=None):
    """Runs argv to completion or its deadline. Returns a dict: rc, out, err, timed_out,
    over_memory (killed because RSS passed rss_cap_kib), maxrss_kib (the child's peak RSS from
    wait4; its descendants are not counted), wall_s. The child's CPU time goes to account."""
    with tempfile.TemporaryFile(mode="w+", errors="replace") as out, \
            tempfile.TemporaryFile(mode="w+", errors="replace") as err:
        start = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    env=env, cwd=cwd, start_new_session=True)
        except OSError as e:
            return {"rc": None, "out": "", "err": f"could not start {argv[0]}: {e}",
                    "timed_out": False, "over_memory": False, "maxrss_kib": 0, "wall_s": 0.0}
        deadline = start + timeout_s
        timed_out = over_memory = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            if time.monotonic() >= deadline:
                timed_out = True
            elif rss_cap_kib is not None and rss_kib(proc.pid) > rss_cap_kib:
                over_memory = True
            if timed_out or over_memory:
                status, usage = kill_group(proc.pid)
                break
            time.sleep(poll_s)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        if account is not None:
            account.add(usage)
        out.seek(0)
        err.seek(0)
        return {"rc": proc.returncode, "out": out.read(), "err": err.read(),
                "timed_out": timed_out, "over_memory": over_memory,
                "maxrss_kib": usage.ru_maxrss, "wall_s": time.monotonic() - start}


def kill_group(pid):
    """SIGTERM, then SIGKILL, the child's process group (its own: a new session); reaps the
    child and returns (status, rusage)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        give_up = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < give_up:
            reaped, status, usage = os.wait4(pid, os.WNOHANG)
            if reaped == pid:
                return status, usage
            time.sleep(POLL_S)
    _, status, usage = os.wait4(pid, 0)  # SIGKILL cannot be refused
    return status, usage


def failure(what, result, timeout_s):
    """Why a finished child counts as failed, or None."""
    if result["timed_out"]:
        return f"{what}: hung; killed after {timeout_s} s"
    if result["over_memory"]:
        return f"{what}: killed when its RSS passed the memory cap"
    if result["rc"] != 0:
        return f"{what}: exit {result['rc']}: {tail(result['err'])}"
    return None


def json_lines(text):
    """Every line of text that parses as a JSON object, in order."""
    lines = []
    for raw in text.splitlines():
        raw = raw.strip()
        if raw.startswith("{"):
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                lines.append(obj)
    return lines


def json_line(text):
    """The last line of text that parses as a JSON object, or None."""
    lines = json_lines(text)
    return lines[-1] if lines else None


# ---------------------------------------------------------------------------------------------
# Quietness.

class CpuAccount:
    """Other users' share of the CPUs over a stretch of time: all CPUs' busy time from
    /proc/stat, less what this driver and its children used (their rusage)."""

    def __init__(self, parent=None):
        self.ours_s = 0.0  # children's user + system time, added as each is reaped
        self.parent = parent  # the enclosing stretch's account, which counts the same children
        self.start = self._sample()

    @staticmethod
    def _sample():
        try:
            with open("/proc/stat", encoding="ascii") as fh:
                fields = [int(x) for x in fh.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        self_usage = resource.getrusage(resource.RUSAGE_SELF)
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields), idle, self_usage.ru_utime + self_usage.ru_stime

    def add(self, usage):
        self.ours_s += usage.ru_utime + usage.ru_stime
        if self.parent is not None:
            self.parent.add(usage)

    def others_fraction(self):
        end = self._sample()
        if self.start is None or end is None:
            return None
        hz = os.sysconf("SC_CLK_TCK")
        total_s = (end[0] - self.start[0]) / hz
        busy_s = total_s - (end[1] - self.start[1]) / hz
        ours_s = self.ours_s + end[2] - self.start[2]
        return max(0.0, busy_s - ours_s) / total_s if total_s > 0 else None


def cpu_busy_fraction(seconds):
    """The fraction of all CPUs' time spent busy over `seconds`, from /proc/stat. Taken while
    this driver runs nothing, it is other users' share of the machine."""
    def sample():
        with open("/proc/stat", encoding="ascii") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
        return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)
    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    total = total1 - total0
    return (total - (idle1 - idle0)) / total if total > 0 else None


def wait_for_quiet(seconds):
    """Samples other users' CPU share until it is at most BUSY_WARN_FRACTION or `seconds` have
    passed; returns the last sample (None when /proc/stat is unreadable)."""
    start = time.monotonic()
    busy = cpu_busy_fraction(BUSY_SAMPLE_S)
    if busy is None or busy <= BUSY_WARN_FRACTION or seconds <= 0:
        return busy
    log(f"waiting up to {seconds} s for a quieter machine: other users use {busy:.0%} of "
        f"the CPUs")
    while busy is not None and busy > BUSY_WARN_FRACTION and time.monotonic() < start + seconds:
        busy = cpu_busy_fraction(BUSY_SAMPLE_S)
    log(f"  after {time.monotonic() - start:.0f} s: {busy:.0%}" if busy is not None else
        "  /proc/stat unreadable")
    return busy


def noisy(sample):
    """Whether other users took more than BUSY_WARN_FRACTION during a run (sample["others"])."""
    return sample["others"] is not None and sample["others"] > BUSY_WARN_FRACTION


def run_quietly(run_once, retries):
    """run_once() -> sample (a dict with "error" and "others"), rerun up to `retries` times
    while the run was noisy, after waiting up to NOISY_WAIT_S for quiet. The quieter run, or a
    failure, counts."""
    sample = run_once()
    for _ in range(retries):
        if sample["error"] or not noisy(sample):
            break
        log(f"  other users took {sample['others']:.0%} of the CPUs during it; rerunning")
        wait_for_quiet(NOISY_WAIT_S)
        again = run_once()
        if again["error"] or again["others"] < sample["others"]:
            sample = again
    return sample


def interleaved(repeats, items, sides_of):
    """(repeat, item, side) in run order: repeats outermost, then items, then the item's sides
    (sides_of(item)), reversed on every other repeat so that neither side always runs right
    after the other."""
    for repeat in range(repeats):
        for item in items:
            order = list(sides_of(item))
            if repeat % 2:
                order.reverse()
            for side in order:
                yield repeat, item, side


def share_text(fraction):
    return "unknown" if fraction is None else f"{fraction:.0%}"


def quiet_header_line(facts, what_runs):
    """The report's line on other users' share: facts holds busy_fraction (before the run),
    others_during (the whole run), peaks_others (while the peaks were measured), noisy_runs,
    runs and noisy_retries; what_runs names the runs ("case runs")."""
    peaks_others = facts["peaks_others"]
    suspect = facts["noisy_runs"] or (peaks_others is not None and
                                      peaks_others > BUSY_WARN_FRACTION)
    warn = " - **the machine was busy; figures are suspect**" if suspect else ""
    return (f"- other users' share of the CPUs: {share_text(facts['busy_fraction'])} in the "
            f"second before the run, {share_text(facts['others_during'])} over all of it "
            f"(waits included), {share_text(peaks_others)} while the peaks were measured; "
            f"{facts['noisy_runs']} of {facts['runs']} {what_runs} had them above "
            f"{BUSY_WARN_FRACTION:.0%} even after up to {facts['noisy_retries']} reruns{warn}")


def cpu_model():
    """The CPU (model, vendor family and model numbers, caches: bench/lib/machine.py) and the
    OpenBLAS core every side of the run uses (pin_blas_core)."""
    text = machine.describe_cpu()
    core = os.environ.get("OPENBLAS_CORETYPE")
    return text + (f"; OpenBLAS core {core} for every side" if core else "")


# Variables that change which kernels OpenBLAS runs, for every process that loads it.
OPENBLAS_KERNEL_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def pin_blas_core(kiln):
    """Makes every child of this run use the OpenBLAS core Kiln runs by its own choice on this
    CPU (OpenBLAS's, or the one `kiln` forces when OpenBLAS falls back: kiln/ops/blas.h), so
    Kiln and PyTorch compare like with like whatever the environment set. Sets
    OPENBLAS_CORETYPE in this process's environment (children inherit it) and drops
    OPENBLAS_L2_SIZE. Returns a note for the report, or an error string when kiln cannot say."""
    before = {k: os.environ[k] for k in OPENBLAS_KERNEL_VARS if k in os.environ}
    env = {k: v for k, v in os.environ.items() if k not in OPENBLAS_KERNEL_VARS}
    try:
        r = subprocess.run([kiln, "facts", "--json"], capture_output=True, text=True, env=env,
                           timeout=60)
        core = json.loads(r.stdout)["blas"]["core"]
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
        return f"error: cannot ask {kiln} for its BLAS core ({e}); the environment is as it was"
    for k in OPENBLAS_KERNEL_VARS:
        os.environ.pop(k, None)
    os.environ["OPENBLAS_CORETYPE"] = core
    found = ", ".join(f"{k}={v}" for k, v in before.items()) or "no OpenBLAS variable"
    return f"OpenBLAS core {core} for Kiln and every peer (the environment had {found})"


# ---------------------------------------------------------------------------------------------
# Building the harnesses: a target is rebuilt when it is missing, older than a source, or was
# built with another command (the command is kept beside it in TARGET.cmd).

def pkg_config(*args):
    result = run_child(["pkg-config", *args], PROBE_TIMEOUT_S)
    if result["rc"] != 0:
        raise OSError(f"pkg-config {' '.join(args)} failed: {tail(result['err'])}")
    return result["out"].split()


def sgemm_target():
    """(output, command, inputs) of sgemm_peak, linked with Kiln's OpenBLAS found as CMake
    finds it (cmake/KilnDependencies.cmake: pkg-config)."""
    blas = pkg_config("--cflags", "--libs", "openblas")
    # oneDNN beside it: the peak is the better library's (kiln/ops/gemm_library.h).
    return (SGEMM_BIN, ["g++"] + CXXFLAGS + ["-fopenmp", "-o", SGEMM_BIN, SGEMM_SRC] + blas +
            ["-ldnnl"], [SGEMM_SRC])


def build(make_targets):
    """Builds what is out of date of make_targets() -> {name: (output, command, inputs)} (which
    may raise OSError). Returns a list of errors."""
    os.makedirs(BUILD, exist_ok=True)
    try:
        targets = make_targets()
    except OSError as e:
        return [f"build: {e}"]
    errors = []
    for path, cmd, inputs in targets.values():
        stamp = path + ".cmd"
        cmd_text = shlex.join(cmd)
        try:
            with open(stamp, encoding="utf-8") as fh:
                same_cmd = fh.read() == cmd_text
            fresh = os.path.getmtime(path) >= max(os.path.getmtime(i) for i in inputs)
        except OSError:
            same_cmd = fresh = False
        if same_cmd and fresh:
            continue
        log(f"build: {rel(path)}")
        result = run_child(cmd, BUILD_TIMEOUT_S)
        why = failure(f"build of {rel(path)}", result, BUILD_TIMEOUT_S)
        if why:
            errors.append(why)
            continue
        with open(stamp, "w", encoding="utf-8") as fh:
            fh.write(cmd_text)
    return errors


# ---------------------------------------------------------------------------------------------
# The tuned torch environment.

def package_version(package):
    result = run_child(["dpkg-query", "-W", "-f=${Version}", package], PROBE_TIMEOUT_S)
    if result["rc"] != 0 or not result["out"].strip():
        raise OSError(f"{package} is not installed (dpkg-query: {tail(result['err'])})")
    return result["out"].strip()


def openmp_lib_dir():
    """The unpacked package's openblas-openmp folder, or None."""
    found = sorted(glob.glob(os.path.join(OPENBLAS_OPENMP_DIR, "usr", "lib", "*",
                                          "openblas-openmp", "libopenblas.so.0")))
    return os.path.dirname(found[0]) if found else None


def prepare_openmp_openblas():
    """Unpacks libopenblas0-openmp of the system OpenBLAS's version into
    build/bench-ops/openblas-openmp/ (apt-get download + dpkg -x; nothing is installed), unless
    that version is there already. Returns (lib_dir, version)."""
    version = package_version(OPENBLAS_SYSTEM_PACKAGE)
    lib_dir = openmp_lib_dir()
    try:
        with open(OPENBLAS_OPENMP_STAMP, encoding="utf-8") as fh:
            if fh.read().strip() == version and lib_dir:
                return lib_dir, version
    except OSError:
        pass
    log(f"tuned torch: downloading {OPENBLAS_OPENMP_PACKAGE}={version} into "
        f"{rel(OPENBLAS_OPENMP_DIR)}")
    os.makedirs(BUILD, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="openblas-deb-", dir=BUILD) as download:
        # apt-get download writes into its working directory; the sandbox user cannot write
        # into a root-owned temporary folder, so the download runs as the caller.
        result = run_child(["sh", "-c", f"cd {shlex.quote(download)} && exec apt-get download "
                            f"-o APT::Sandbox::User=root "
                            f"{OPENBLAS_OPENMP_PACKAGE}={shlex.quote(version)}"],
                           DOWNLOAD_TIMEOUT_S)
        why = failure(f"apt-get download {OPENBLAS_OPENMP_PACKAGE}={version}", result,
                      DOWNLOAD_TIMEOUT_S)
        if why:
            raise OSError(why)
        debs = glob.glob(os.path.join(download, "*.deb"))
        if len(debs) != 1:
            raise OSError(f"apt-get download left {len(debs)} .deb files, not 1")
        shutil.rmtree(OPENBLAS_OPENMP_DIR, ignore_errors=True)
        result = run_child(["dpkg", "-x", debs[0], OPENBLAS_OPENMP_DIR], PROBE_TIMEOUT_S)
        why = failure(f"dpkg -x {os.path.basename(debs[0])}", result, PROBE_TIMEOUT_S)
        if why:
            raise OSError(why)
    lib_dir = openmp_lib_dir()
    if not lib_dir:
        raise OSError(f"{OPENBLAS_OPENMP_PACKAGE} unpacked without an openblas-openmp/"
                      f"libopenblas.so.0 under {rel(OPENBLAS_OPENMP_DIR)}")
    with open(OPENBLAS_OPENMP_STAMP, "w", encoding="utf-8") as fh:
        fh.write(version + "\n")
    return lib_dir, version


def tcmalloc_path():
    found = sorted(glob.glob(TCMALLOC_GLOB))
    if not found:
        raise OSError(f"no {TCMALLOC_GLOB}: apt-get install libtcmalloc-minimal4")
    return found[0]


def prepare_tuned():
    """(lib_dir, openblas version, tcmalloc path) of the tuned environment; raises OSError
    naming what could not be prepared."""
    lib_dir, version = prepare_openmp_openblas()
    return lib_dir, version, tcmalloc_path()


def torch_env(tuned, lib_dir, tcmalloc, threads):
    """The environment of a torch process. Both kinds get OMP_NUM_THREADS (torch's own
    set_num_threads does the rest); the tuned one adds tcmalloc and the OpenMP OpenBLAS."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["OMP_NUM_THREADS"] = str(threads)
    if tuned:
        env["LD_PRELOAD"] = tcmalloc
        rest = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = lib_dir + (":" + rest if rest else "")
    return env


def mapped_libraries():
    """Paths of the shared objects this process has mapped, from /proc/self/maps."""
    paths = set()
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            fields = line.split(None, 5)
            if len(fields) == 6 and ".so" in fields[5]:
                paths.add(fields[5].strip())
    return paths


def blas_facts():
    """What a torch process reports about itself: {"blas": the libopenblas file it mapped,
    "blas_threading": "openmp"|"pthread"|"serial"|"unknown" (from its folder), "tcmalloc":
    whether libtcmalloc is mapped}."""
    libs = mapped_libraries()
    blas = sorted(p for p in libs if "libopenblas" in os.path.basename(p))
    path = blas[0] if blas else None
    threading = "unknown"
    if path:
        for flavour in ("openmp", "pthread", "serial"):
            if f"openblas-{flavour}" in path:
                threading = flavour
    tcmalloc = any("libtcmalloc" in os.path.basename(p) for p in libs)
    return {"blas": path, "blas_threading": threading, "tcmalloc": tcmalloc}


def check_torch_libraries(line, tuned, lib_dir):
    """Why a torch result line shows the wrong libraries, or None. Tuned: libopenblas from
    lib_dir and tcmalloc mapped. Untuned: neither."""
    blas = line.get("blas")
    if not blas:
        return "no libopenblas mapped in the torch process"
    if tuned:
        if not lib_dir or os.path.realpath(os.path.dirname(blas)) != os.path.realpath(lib_dir):
            return f"tuned torch mapped {blas}, not the OpenMP OpenBLAS in {rel(lib_dir or '?')}"
        if line.get("tcmalloc") is not True:
            return "tuned torch did not map libtcmalloc (LD_PRELOAD had no effect)"
    else:
        if line.get("blas_threading") == "openmp" or (
                lib_dir and os.path.realpath(os.path.dirname(blas)) == os.path.realpath(lib_dir)):
            return f"untuned torch mapped the OpenMP OpenBLAS {blas}"
        if line.get("tcmalloc") is not False:
            return "untuned torch mapped libtcmalloc"
    return None


def torch_facts(line, tuned, tcmalloc, lib_dir):
    """One line on what a torch run (its result line) used, for a report's header."""
    line = line or {}
    blas = line.get("blas") or "?"
    if tuned:
        return (f"torch {line.get('torch', '?')}, LD_PRELOAD={tcmalloc} (mapped: "
                f"{'yes' if line.get('tcmalloc') else 'no'}), LD_LIBRARY_PATH first "
                f"{rel(lib_dir or '?')}; libopenblas mapped: {rel(blas)} "
                f"({line.get('blas_threading', '?')})")
    return (f"glibc malloc (tcmalloc mapped: {'yes' if line.get('tcmalloc') else 'no'}), "
            f"system BLAS; libopenblas mapped: {rel(blas)} ({line.get('blas_threading', '?')})")


# ---------------------------------------------------------------------------------------------
# Kiln.

def probe_kiln(kiln, subcommand):
    """(present, why-not). Present when `kiln --help` lists `subcommand`."""
    if not os.path.isfile(kiln) or not os.access(kiln, os.X_OK):
        return False, f"no binary at {rel(kiln)}"
    result = run_child([kiln, "--help"], PROBE_TIMEOUT_S)
    if result["timed_out"]:
        return False, f"`{rel(kiln)} --help` hung"
    # A word of its own in the help text (CLI11 lists "  NAME  description" lines), so that
    # "train" is not found inside "trainer".
    if not re.search(rf"(^|\s){re.escape(subcommand)}(\s|$)", result["out"] + result["err"]):
        return False, f"{rel(kiln)} has no {subcommand} subcommand"
    return True, None


def kiln_version(kiln):
    result = run_child([kiln, "version"], PROBE_TIMEOUT_S)
    return result["out"].strip().splitlines()[0] if result["rc"] == 0 and result["out"] else "?"


# ---------------------------------------------------------------------------------------------
# The sgemm peak.

def sgemm_peaks(threads, account):
    """Runs build/bench-ops/sgemm_peak on each thread count of `threads`. Returns
    ({threads: GFLOP/s}, {"threading", "config"} of the OpenBLAS it used, error or None)."""
    text = ",".join(str(t) for t in threads)
    log(f"peaks: sgemm {SGEMM_SIZE}^3 on {text} threads")
    result = run_child([SGEMM_BIN, "--size", str(SGEMM_SIZE), "--threads", text, "--reps",
                        str(SGEMM_REPS), "--json"], SGEMM_TIMEOUT_S, account=account)
    why = failure("sgemm_peak", result, SGEMM_TIMEOUT_S)
    gflops, facts = {}, {}
    for line in json_lines(result["out"]):
        if line.get("op") == "sgemm":
            if line.get("correct") is not True:
                why = why or f"sgemm_peak on {line.get('threads')} threads computed a wrong result"
            gflops[int(line["threads"])] = float(line["gflops"])
            facts.update(threading=line.get("blas_threading"), config=line.get("blas_config"))
            facts.setdefault("by_threads", {})[int(line["threads"])] = {
                k: line.get(k) for k in ("best_library", "openblas_gflops", "onednn_gflops",
                                         "onednn_version", "blas_core")}
    return gflops, facts, why


def sgemm_peak_text(gflops, facts):
    """The peak line of a report: per thread count the better library's figure, and both."""
    parts = []
    for t in (1, 2):
        d = (facts or {}).get("by_threads", {}).get(t, {})
        both = ""
        if d.get("openblas_gflops") is not None:
            both = (f" ({d.get('best_library')}; OpenBLAS {d.get('blas_core')} "
                    f"{fmt(d.get('openblas_gflops'))}, oneDNN {d.get('onednn_version')} "
                    f"{fmt(d.get('onednn_gflops'))})")
        parts.append(f"{t} thread{'s' if t > 1 else ''} {fmt(gflops.get(t))} GFLOP/s{both}")
    return (f"sgemm peak ({SGEMM_SIZE}^3, best of {SGEMM_REPS}, the better of OpenBLAS "
            f"({(facts or {}).get('threading', '?')}) and oneDNN, the two GEMM libraries Kiln "
            f"races): " + ", ".join(parts))


def best_peaks_quietly(measure, kinds, account, retries):
    """measure(account) -> (peaks, errors), where peaks[kind] is {threads: figure} for each
    kind of `kinds`; rerun up to `retries` times while other users took more than
    BUSY_WARN_FRACTION of the CPUs. A peak is a best figure, so each keeps its best over the
    attempts. Returns (peaks, errors, other users' share in the quietest attempt)."""
    best, errors, quietest, others = None, [], None, None
    for attempt in range(1 + retries):
        if attempt:
            log(f"peaks: other users took {others:.0%} of the CPUs; measuring again")
            wait_for_quiet(NOISY_WAIT_S)
        peaks_account = CpuAccount(parent=account)
        peaks, errors = measure(peaks_account)
        others = peaks_account.others_fraction()
        if best is None:
            best = peaks
        else:
            for kind in kinds:
                for t, value in peaks[kind].items():
                    best[kind][t] = max(value, best[kind].get(t, 0.0))
        if others is not None and (quietest is None or others < quietest):
            quietest = others
        if errors or others is None or others <= BUSY_WARN_FRACTION:
            break
    return best, errors, quietest
