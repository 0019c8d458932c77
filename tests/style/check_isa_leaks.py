#!/usr/bin/env python3
"""No instruction beyond plain x86-64 can leak out of kiln_ops' per-ISA kernel objects.

  check_isa_leaks.py OBJECT...   (or one ';'-separated list, as CMake passes it)

kiln_ops compiles each kernel family three times (scalar, AVX2, AVX-512; see
src/ops/CMakeLists.txt) and picks one at run time, so one binary runs on any x86-64. Everything
those objects define must therefore either live in their ISA's own namespaces
(kiln::ops::cpu::<isa>, kiln::ops::simd::<isa>) or be free of AVX: an inline function or
template instantiation they share with other objects (a weak symbol) is emitted by every one of
them under the same name, and the linker keeps whichever copy it meets first, so the AVX-512
copy could end up called from the scalar kernels on a CPU without AVX-512.

For each AVX2/AVX-512 object given (others are ignored), every weak function symbol outside the
ISA namespaces is disassembled; any VEX/EVEX instruction (a 'v' mnemonic, or a ymm, zmm or mask
register) is an offence. Exits 1 listing them, 0 when clean.
"""
import re
import subprocess
import sys

ISA_OF_OBJECT = re.compile(r"_(avx2|avx512)\.cc\.o(bj)?$")
AVX_INSTRUCTION = re.compile(r"^\s*[0-9a-f]+:\s+(v[a-z0-9]+)\b|%[yz]mm\d+|%k[0-7]\b")


def weak_functions(obj):
    """(mangled, demangled) of the weak function symbols `obj` defines."""
    out = subprocess.run(["nm", "--defined-only", obj], capture_output=True, text=True,
                         check=True).stdout
    mangled = [line.split()[2] for line in out.splitlines()
               if len(line.split()) == 3 and line.split()[1] == "W"]
    if not mangled:
        return []
    demangled = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True,
                               text=True, check=True).stdout.splitlines()
    return list(zip(mangled, demangled))


def avx_instructions(obj, symbol):
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--disassemble={symbol}", obj],
                         capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in out.splitlines() if AVX_INSTRUCTION.search(line)]


def main(objects):
    offences = []
    checked = 0
    for obj in objects:
        match = ISA_OF_OBJECT.search(obj)
        if not match:
            continue
        isa = match.group(1)
        checked += 1
        own = (f"kiln::ops::cpu::{isa}::", f"kiln::ops::simd::{isa}::")
        for mangled, name in weak_functions(obj):
            if name.startswith(own):
                continue
            found = avx_instructions(obj, mangled)
            if found:
                offences.append(f"{obj}: {name} is shared with other objects but uses "
                                f"{isa} instructions, e.g. '{found[0]}'")
    if checked == 0:
        print("check_isa_leaks: no AVX2/AVX-512 kernel objects among the arguments",
              file=sys.stderr)
        return 1
    for offence in offences:
        print(offence)
    print(f"check_isa_leaks: {checked} objects, {len(offences)} offences", file=sys.stderr)
    return 1 if offences else 0


if __name__ == "__main__":
    # CMake's $<TARGET_OBJECTS:...> arrives as one ';'-separated argument.
    sys.exit(main([path for arg in sys.argv[1:] for path in arg.split(";") if path]))
