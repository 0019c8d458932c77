// The sections of the node-facts document that need more than a file read; facts.cc assembles
// them. Each returns a JSON object whose every field is present, null when unknown.
#ifndef KILN_PREFLIGHT_FACT_SECTIONS_H_
#define KILN_PREFLIGHT_FACT_SECTIONS_H_

#include <nlohmann/json.hpp>

namespace kiln::preflight {

// {soname-as-loaded: resolved path} for every shared object mapped into this process.
nlohmann::ordered_json shared_object_facts();

// Versions of the libraries Kiln links. Header-only libraries report the version compiled in;
// shared libraries the version actually loaded (from the library itself, or from the file name of
// the resolved shared object).
nlohmann::ordered_json library_facts(const nlohmann::ordered_json& shared_objects);

// NVIDIA driver and CUDA versions and devices, probed with dlopen so that the binary needs no
// CUDA at build or run time. All null on a machine without them.
nlohmann::ordered_json gpu_facts();

// {NAME: value} of the variables in `env` (a NULL-terminated "NAME=value" array, environ) that
// change what Kiln or its libraries do: KILN_*, OMP_*, GOMP_*, KMP_*, OPENBLAS_*, GOTO_*, MKL_*,
// DNNL_*, ONEDNN_*, CUDA_*, MALLOC_*, GLIBC_TUNABLES. A name with TOKEN, SECRET, PASSWORD or KEY
// in it has the value "(redacted)". Sorted by name; values cut at 4 KiB.
nlohmann::ordered_json environment_facts(char** env);

}  // namespace kiln::preflight

#endif  // KILN_PREFLIGHT_FACT_SECTIONS_H_
