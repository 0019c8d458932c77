"""What the drivers' tests share (bench/ops/run_test.py, bench/train/run_test.py).

- write_fake_kiln(directory, ...) makes an executable stand-in `kiln` there: `--help` lists
  the given subcommands, `version` prints the given version, and any other call fails with
  exit 3 and the given message when FAKE_KILN_FAIL is set, or else runs `body` (Python, with
  json, os, sys imported and the arguments in `args`), which prints the lines the real
  subcommand would. The drivers' figures then come from numbers the test knows.
- load_script(path, name) imports a driver (an executable without .py) as a module.
"""
import importlib.machinery
import importlib.util
import os
import stat
import textwrap

PREAMBLE = """\
#!/usr/bin/env python3
# A stand-in for `kiln`, written by bench/lib/driver_testing.py.
import json, os, sys
args = sys.argv[1:]
if args == ["--help"]:
    print("Subcommands:")
    for name in {subcommands!r}:
        print("  " + name)
    sys.exit(0)
if args == ["version"]:
    print({version!r})
    sys.exit(0)
if os.environ.get("FAKE_KILN_FAIL"):
    print({failure!r}, file=sys.stderr)
    sys.exit(3)
"""


def write_fake_kiln(directory, subcommands, version, failure, body):
    """The path of the fake `kiln` written into `directory`."""
    path = os.path.join(directory, "kiln")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(PREAMBLE.format(subcommands=list(subcommands), version=version,
                                 failure=failure))
        fh.write(textwrap.dedent(body))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def load_script(path, name):
    """The Python file at `path` (any name) imported as module `name`."""
    loader = importlib.machinery.SourceFileLoader(name, path)
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
