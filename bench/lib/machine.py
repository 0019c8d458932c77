"""Which machine a benchmark ran on, for the line every table in docs/PERFORMANCE.md opens with:
the CPU model (with its vendor, family and model numbers, which tell apart CPUs that share a
marketing name such as "AMD EPYC"), and the cache sizes the kernel reports for CPU 0.

  describe_cpu() -> "AMD EPYC (AuthenticAMD family 26 model 2), L1d 48 KiB, L2 1 MiB, L3 32 MiB"

Reads /proc/cpuinfo and /sys/devices/system/cpu/cpu0/cache/; a part it cannot read is left out.

  cpu_flags() -> {"fpu", ..., "avx512_bf16", "amx_bf16", ...}: lscpu's "Flags:" (the kernel's
  names, as /proc/cpuinfo's "flags", which it falls back to when lscpu cannot be run).
"""
import os
import subprocess

LSCPU_TIMEOUT_S = 30  # lscpu reads /proc and /sys: milliseconds

CACHE_DIR = "/sys/devices/system/cpu/cpu0/cache"


def cpuinfo_fields(path="/proc/cpuinfo"):
    """The first processor's fields of /proc/cpuinfo, as a dict of strings."""
    fields = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    break  # the end of the first processor's block
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def caches(cache_dir=CACHE_DIR):
    """[(name, bytes)] for CPU 0's data and unified caches, by level: [("L1d", 49152), ...]."""
    out = []
    try:
        entries = sorted(e for e in os.listdir(cache_dir) if e.startswith("index"))
    except OSError:
        return out
    for entry in entries:
        d = os.path.join(cache_dir, entry)
        try:
            with open(os.path.join(d, "level")) as fh:
                level = fh.read().strip()
            with open(os.path.join(d, "type")) as fh:
                kind = fh.read().strip()
            with open(os.path.join(d, "size")) as fh:
                size = fh.read().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        digits = size[:-1] if size[-1:] in "KMG" else size
        try:
            nbytes = int(digits) * scale
        except ValueError:
            continue
        out.append((f"L{level}" + ("d" if kind == "Data" else ""), nbytes))
    return out


def flags_from_lscpu(text):
    """The set of flags on lscpu's "Flags:" line, or None when it has none."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "Flags":
            return set(value.split())
    return None


def cpu_flags(cpuinfo="/proc/cpuinfo"):
    """The CPU's feature flags: lscpu's, else /proc/cpuinfo's first processor's (an empty set
    when neither can be read)."""
    try:
        r = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=LSCPU_TIMEOUT_S,
                           env=dict(os.environ, LC_ALL="C"))
        flags = flags_from_lscpu(r.stdout) if r.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        flags = None
    if flags is None:
        flags = set(cpuinfo_fields(cpuinfo).get("flags", "").split())
    return flags


def fmt_bytes(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def describe_cpu(cpuinfo="/proc/cpuinfo", cache_dir=CACHE_DIR):
    f = cpuinfo_fields(cpuinfo)
    text = f.get("model name", "unknown CPU")
    ident = " ".join(x for x in (f.get("vendor_id"),
                                 f"family {f['cpu family']}" if "cpu family" in f else None,
                                 f"model {f['model']}" if "model" in f else None) if x)
    if ident:
        text += f" ({ident})"
    for name, nbytes in caches(cache_dir):
        text += f", {name} {fmt_bytes(nbytes)}"
    return text


if __name__ == "__main__":
    print(describe_cpu())
