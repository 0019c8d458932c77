"""End-to-end tests of `kiln ops-check` and `kiln ops-bench`: the JSON lines scripts rely on."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kiln_test import run_kiln  # noqa: E402

ISAS = ["scalar", "avx2", "avx512"]
# Every public op ops-check must cover (include/kiln/ops/*.h).
OPS = {"matmul_forward", "matmul_backward", "attention_forward", "attention_backward",
       "layernorm_forward", "layernorm_backward", "rmsnorm_forward", "rmsnorm_backward",
       "gelu_forward", "gelu_backward", "residual_forward", "residual_backward",
       "embedding_forward", "embedding_backward", "cross_entropy_forward",
       "cross_entropy_backward", "adamw_update", "global_grad_norm", "convert_f32_to_bf16",
       "convert_bf16_to_f32"}


def machine_isas():
    best = json.loads(run_kiln("facts", "--json", check=True).stdout)["cpu"]["best_isa"]
    return ISAS[:ISAS.index(best) + 1]


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


# oneDNN's bf16 matmul paths, best first: the ONEDNN_MAX_CPU_ISA value that caps oneDNN at each,
# the CPU flag it needs, and the kernel ops-check must then name. They are an AVX-512 Context's;
# below AVX-512 (and where oneDNN has none) the products are widened to f32 (WIDENED).
BF16_PATHS = [("AVX512_CORE_AMX", "amx_bf16", "avx512_core_amx_bf16"),
              ("AVX512_CORE_BF16", "avx512_bf16", "avx512_core_bf16"),
              ("AVX512_CORE", "avx512f", "gemm:jit")]
WIDENED = "bf16 widened to f32"
BF16_OPS = {"matmul_forward", "matmul_backward", "attention_forward", "attention_backward"}


class Bf16MatmulPathsTest(unittest.TestCase):
    """Every bf16 matmul path this CPU can run is checked by ops-check against the double
    reference: each of oneDNN's, forced by capping oneDNN's ISA, at --isa avx512, and the
    widened one at --isa avx2 (every CPU these tests run on has AVX2)."""

    def bf16_rows(self, isa, env=None):
        r = run_kiln("ops-check", "--json", "--isa", isa, timeout=300, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        rows = [x for x in json_lines(r.stdout) if "bf16" in x["shape"]]
        self.assertEqual({x["op"] for x in rows}, BF16_OPS)
        for row in rows:
            self.assertTrue(row["ok"], row)
        return [x for x in rows if x["op"].startswith("matmul")]

    def test_each_onednn_bf16_path_this_cpu_has_passes_ops_check(self):
        flags = cpu_flags()
        paths = [p for p in BF16_PATHS if p[1] in flags]
        if not paths:
            self.skipTest("no AVX-512: oneDNN has no bf16 matmul here (the widened path is "
                          "checked below)")
        for cap, _flag, kernel in paths:
            with self.subTest(path=cap):
                env = dict(os.environ, ONEDNN_MAX_CPU_ISA=cap)
                for row in self.bf16_rows("avx512", env):
                    self.assertIn(kernel, row["gemm"], row)

    def test_the_widened_bf16_path_passes_ops_check(self):
        for row in self.bf16_rows("avx2"):
            self.assertIn(WIDENED, row["gemm"], row)


class OpsCheckTest(unittest.TestCase):
    def test_every_op_is_ok_on_every_isa_this_machine_has(self):
        r = run_kiln("ops-check", "--json", timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = json_lines(r.stdout)
        for row in rows:
            for key in ["op", "isa", "max_rel_err", "ok"]:
                self.assertIn(key, row)
            self.assertTrue(row["ok"], row)
            self.assertLessEqual(row["max_rel_err"], row["tolerance"], row)
        for isa in machine_isas():
            covered = {row["op"] for row in rows if row["isa"] == isa}
            self.assertEqual(covered, OPS, f"ops checked on {isa}")

    def test_isa_flag_restricts_to_that_path(self):
        r = run_kiln("ops-check", "--json", "--isa", "scalar", timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual({row["isa"] for row in json_lines(r.stdout)}, {"scalar"})

    def test_unknown_isa_is_bad_input(self):
        r = run_kiln("ops-check", "--isa", "sse9")
        self.assertEqual(r.returncode, 2)
        self.assertIn("sse9", r.stderr)


class OpsBenchTest(unittest.TestCase):
    def test_attention_line_counts_flops_as_flashattention2(self):
        r = run_kiln("ops-bench", "--op", "attention", "--shape", "B=1,H=2,T=128,D=64",
                     "--causal", "--pass", "fwdbwd", "--threads", "2", "--iters", "2",
                     "--warmup", "1", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = json_lines(r.stdout)
        self.assertEqual(len(rows), 1)
        row = rows[0]
        for key in ["op", "shape", "pass", "ms", "gflops", "isa"]:
            self.assertIn(key, row)
        self.assertEqual(row["op"], "attention")
        self.assertEqual(row["pass"], "fwdbwd")
        # 4*B*H*T^2*D forward, 3.5x for forward + backward, halved for causal.
        self.assertEqual(row["flops"], 4 * 1 * 2 * 128 * 128 * 64 * 3.5 / 2)
        self.assertGreater(row["ms"], 0)
        self.assertAlmostEqual(row["gflops"], row["flops"] / (row["ms"] * 1e6), delta=1e-6 *
                               row["gflops"] + 1e-9)

    def test_forced_isa_is_reported(self):
        r = run_kiln("ops-bench", "--op", "gelu", "--shape", "N=4096", "--threads", "1",
                     "--isa", "scalar", "--iters", "2", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json_lines(r.stdout)[0]["isa"], "scalar")

    def test_unknown_op_and_bad_shape_are_bad_input_naming_them(self):
        r = run_kiln("ops-bench", "--op", "nope", "--shape", "N=1", "--threads", "1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("'nope'", r.stderr)
        r = run_kiln("ops-bench", "--op", "attention", "--shape", "B=1,H=2,T=x,D=64",
                     "--threads", "1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("T", r.stderr)


if __name__ == "__main__":
    unittest.main()
