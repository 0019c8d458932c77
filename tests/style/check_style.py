#!/usr/bin/env python3
"""House-style checks that run as tests (TigerBeetle's tidy, seastar's checkheaders).

  check_style.py format   every C++ file is clang-formatted (.clang-format at the root)
  check_style.py layers   no library includes a header of a library above it
  check_style.py banned   no banned API and no FIXME in the tree

Exits 1 and lists every offence with file:line; exits 0 when clean.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The layer of each library (docs/ARCHITECTURE.md). A file may include its own library and any
# library of a strictly lower layer; comm and ops share a layer and must not see each other, and
# so do ckpt and launch (checkpoints know nothing of launching ranks, nor the launcher of them).
LAYERS = {"base": 0, "ui": 0, "obs": 1, "comm": 2, "ops": 2, "ckpt": 3, "launch": 3, "train": 4,
          "preflight": 5, "sched": 6, "cli": 7}

# (regex, why) pairs; applied to non-test sources outside tests/ and bench/.
BANNED = [
    (re.compile(r"\bstrcpy\s*\("), "strcpy: use std::string or a bounded copy"),
    (re.compile(r"\bstrcat\s*\("), "strcat: use std::string"),
    (re.compile(r"\bsprintf\s*\("), "sprintf: use snprintf or fmt"),
    (re.compile(r"\bato[ifl]\s*\("), "atoi/atof/atol: no error reporting; use std::from_chars"),
    (re.compile(r"\bstd::rand\s*\(|[^_a-z]rand\s*\(\s*\)"), "rand(): use <random> with a seed"),
    (re.compile(r"\bnew\s+[A-Za-z_:<>]+\s*\["), "raw new[]: use std::vector or unique_ptr<T[]>"),
    (re.compile(r"(?<![_a-z:])sleep\s*\(|\busleep\s*\("), "sleep/usleep: wait on a deadline"),
    (re.compile(r"(?<![.>])\bexit\s*\("), "exit(): library code returns Status; only main() decides"),
]
FIXME = re.compile(r"\bFIXME\b")


def tracked_files():
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, text=True, check=True)
    return [f for f in out.stdout.splitlines() if os.path.isfile(os.path.join(ROOT, f))]


def cxx_files():
    return [f for f in tracked_files() if f.endswith((".h", ".cc", ".cu", ".cuh"))]


def check_format():
    bad = []
    for f in cxx_files():
        r = subprocess.run(["clang-format", "--dry-run", "--Werror", os.path.join(ROOT, f)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            bad.append(f"{f}: not clang-formatted (run: clang-format -i {f})")
    return bad


def library_of(path):
    """The library a file belongs to, or None for tests/bench/tools."""
    parts = path.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[:2] == ["include", "kiln"] and len(parts) > 3:
        return parts[2]
    return None


INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?:kiln/)?([a-z_]+)/')


def check_layers():
    bad = []
    for f in cxx_files():
        lib = library_of(f)
        if lib is None:
            continue
        if lib not in LAYERS:
            bad.append(f"{f}: library '{lib}' has no layer in tests/style/check_style.py")
            continue
        with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m or m.group(1) not in LAYERS:
                    continue
                dep = m.group(1)
                if dep == lib:
                    continue
                if LAYERS[dep] >= LAYERS[lib]:
                    bad.append(f"{f}:{n}: {lib} (layer {LAYERS[lib]}) includes {dep} "
                               f"(layer {LAYERS[dep]}); lower layers never include higher ones")
    return bad


def check_banned():
    bad = []
    for f in tracked_files():
        path = os.path.join(ROOT, f)
        if f.startswith("tests/style/"):
            continue  # this file names the banned things
        try:
            with open(path, encoding="utf-8") as fh:
                lines = fh.readlines()
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        is_product_code = (f.endswith((".h", ".cc", ".cu")) and not f.endswith("_test.cc")
                           and not f.startswith(("tests/", "bench/")))
        for n, line in enumerate(lines, 1):
            if FIXME.search(line):
                bad.append(f"{f}:{n}: FIXME must not reach main (use TODO: with a reason)")
            if not is_product_code:
                continue
            code = line.split("//", 1)[0]
            for pattern, why in BANNED:
                if pattern.search(code):
                    bad.append(f"{f}:{n}: {why}")
    return bad


CHECKS = {"format": check_format, "layers": check_layers, "banned": check_banned}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in CHECKS:
        print(__doc__, file=sys.stderr)
        return 2
    problems = CHECKS[sys.argv[1]]()
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
