// See include/kiln/ops/gemm_library.h.
//
// The race: four of GPT-2's GEMMs at 512 tokens (the MLP's two forward products, A @ W^T, the
// input gradient dY @ W and the weight gradient dY^T @ X), single-threaded through
// sgemm_single_threaded(), each library run kRaceReps times right after the other, after one
// untimed call each. The choice is made on the median of the kRaceReps x 4 paired ratios; the
// GFLOP/s reported are the shapes' flops over the sum of each library's best times. Inputs are
// small integers, so both libraries must produce the same exact output (checked).
#include <kiln/ops/gemm_library.h>

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include <kiln/base/check.h>
#include <kiln/base/clock.h>
#include <kiln/base/json.h>
#include <kiln/base/machine_cache.h>

#include <nlohmann/json.hpp>

#include "ops/gemm_call.h"

namespace kiln::ops {
namespace {

constexpr int kRaceReps = 4;
constexpr size_t kRaceJsonBytesMax = 16 << 10;  // a race is a few hundred bytes
constexpr double kGflopsMax = 1e6;              // a figure above this is no measurement

struct RaceShape {
  bool trans_a, trans_b;
  int64_t m, n, k;
};
// GPT-2 124M, 512 tokens, C = 768: fc and fcproj forward (NT), fc input gradient (NN) and fc
// weight gradient (TN); 2.4 GFLOP each, ~20 ms on one core.
constexpr RaceShape kRaceShapes[] = {{false, true, 512, 3072, 768},
                                     {false, true, 512, 768, 3072},
                                     {false, false, 512, 768, 3072},
                                     {true, false, 3072, 768, 512}};

void fill_small_integers(std::vector<float>& v, uint64_t stride) {
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(static_cast<int64_t>((i * stride) % 7) - 3);
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

Result<GemmChoice> choose_now() {
  GemmChoice choice;
  const std::string pinned = env_or_empty("KILN_GEMM");
  if (!pinned.empty() && pinned != "auto") {
    Result<GemmLibrary> library = parse_gemm_library(pinned);
    if (!library.ok()) return library.status().with_context("KILN_GEMM");
    choice.library = *library;
    choice.why = "KILN_GEMM=" + pinned;
    return choice;
  }
  MachineCacheOptions cache;
  cache.path = env_or_empty("KILN_GEMM_CACHE");
  if (cache.path.empty()) {
    cache.path =
        kiln_cache_dir(env_or_empty("XDG_CACHE_HOME"), env_or_empty("HOME")) + "/gemm-race.json";
  }
  cache.bytes_max = kRaceJsonBytesMax;
  const auto valid = [&](const std::string& text) -> Status {
    KILN_ASSIGN_OR_RETURN(const GemmRace race, gemm_race_from_json(text, cache.path));
    if (race.machine != this_boot_id() || race.cpu_model != this_cpu_model()) {
      return Status::not_found(cache.path + ": raced on another boot or CPU");
    }
    // A race against another OpenBLAS core (a process that did not force it, or a user's
    // OPENBLAS_CORETYPE) says nothing about this process's OpenBLAS.
    const char* core = openblas_get_corename();
    if (race.openblas_core != (core != nullptr ? core : "")) {
      return Status::not_found(cache.path + ": raced against OpenBLAS core " + race.openblas_core);
    }
    return Status();
  };
  const auto measure = [&]() -> Result<std::string> {
    KILN_ASSIGN_OR_RETURN(const GemmRace race, race_gemm_libraries());
    return gemm_race_to_json(race) + "\n";
  };
  Result<CachedText> cached = load_or_measure_cached(cache, valid, measure);
  Result<GemmRace> race = cached.ok() ? gemm_race_from_json(cached->text, cache.path)
                                      : Result<GemmRace>(cached.status());
  if (!race.ok()) {
    choice.why = "no race (" + race.status().to_string() + "): OpenBLAS";
    return choice;
  }
  choice.race = *race;
  choice.library = choose_gemm_library(*race);
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "race: oneDNN %s %.2fx OpenBLAS (%s), median of paired runs; %.1f vs %.1f GFLOP/s",
                race->onednn_version.c_str(), race->onednn_over_openblas,
                race->openblas_core.c_str(), race->onednn_gflops, race->openblas_gflops);
  choice.why = buf;
  return choice;
}

}  // namespace

std::string_view gemm_library_name(GemmLibrary library) {
  return library == GemmLibrary::kOneDnn ? "onednn" : "openblas";
}

Result<GemmLibrary> parse_gemm_library(std::string_view name) {
  if (name == "openblas") return GemmLibrary::kOpenBlas;
  if (name == "onednn") return GemmLibrary::kOneDnn;
  return Status::invalid_argument("'" + std::string(name) +
                                  "' is not a GEMM library: openblas, onednn or auto");
}

GemmLibrary choose_gemm_library(const GemmRace& race) {
  return race.onednn_over_openblas >= kGemmSwitchRatio ? GemmLibrary::kOneDnn
                                                       : GemmLibrary::kOpenBlas;
}

Result<GemmRace> race_gemm_libraries() {
  GemmRace race;
  race.machine = this_boot_id();
  race.cpu_model = this_cpu_model();
  const char* core = openblas_get_corename();
  race.openblas_core = core != nullptr ? core : "";
  race.onednn_version = onednn_version();
  double flops = 0;
  int64_t best_ns[2] = {0, 0};
  std::vector<double> ratios;
  for (const RaceShape& s : kRaceShapes) {
    std::vector<float> a(static_cast<size_t>(s.m * s.k));
    std::vector<float> b(static_cast<size_t>(s.k * s.n));
    fill_small_integers(a, 5);
    fill_small_integers(b, 3);
    std::vector<float> c[2] = {std::vector<float>(static_cast<size_t>(s.m * s.n)),
                               std::vector<float>(static_cast<size_t>(s.m * s.n))};
    const int64_t lda = s.trans_a ? s.m : s.k;
    const int64_t ldb = s.trans_b ? s.k : s.n;
    int64_t best[2] = {INT64_MAX, INT64_MAX};
    for (int rep = 0; rep <= kRaceReps; ++rep) {
      int64_t took[2] = {0, 0};
      for (int lib = 0; lib < 2; ++lib) {
        const GemmLibrary library = lib == 1 ? GemmLibrary::kOneDnn : GemmLibrary::kOpenBlas;
        const int64_t t0 = monotonic_now_ns();
        sgemm_single_threaded(library, s.trans_a, s.trans_b, s.m, s.n, s.k, a.data(), lda, b.data(),
                              ldb, 0.0f, c[lib].data(), s.n);
        took[lib] = std::max<int64_t>(monotonic_now_ns() - t0, 1);
      }
      if (rep == 0) continue;  // warm-up: page faults, the libraries' own start-up
      best[0] = std::min(best[0], took[0]);
      best[1] = std::min(best[1], took[1]);
      ratios.push_back(static_cast<double>(took[0]) / static_cast<double>(took[1]));
    }
    if (c[0] != c[1]) {
      return Status::corruption("GEMM race: OpenBLAS and oneDNN disagree on exact inputs (" +
                                std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                                std::to_string(s.k) + ")");
    }
    flops += 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    best_ns[0] += best[0];
    best_ns[1] += best[1];
  }
  race.openblas_gflops = flops / static_cast<double>(std::max<int64_t>(best_ns[0], 1));
  race.onednn_gflops = flops / static_cast<double>(std::max<int64_t>(best_ns[1], 1));
  KILN_CHECK(!ratios.empty());
  std::sort(ratios.begin(), ratios.end());
  race.onednn_over_openblas = ratios.size() % 2 == 1
                                  ? ratios[ratios.size() / 2]
                                  : (ratios[ratios.size() / 2 - 1] + ratios[ratios.size() / 2]) / 2;
  race.measured_at = format_wall_time_utc(wall_now_ns());
  return race;
}

std::string gemm_race_to_json(const GemmRace& r) {
  nlohmann::ordered_json j;
  j["machine"] = r.machine;
  j["cpu_model"] = r.cpu_model;
  j["openblas_core"] = r.openblas_core;
  j["onednn_version"] = r.onednn_version;
  j["openblas_gflops"] = r.openblas_gflops;
  j["onednn_gflops"] = r.onednn_gflops;
  j["onednn_over_openblas"] = r.onednn_over_openblas;
  j["measured_at"] = r.measured_at;
  return j.dump();
}

Result<GemmRace> gemm_race_from_json(std::string_view json, std::string_view what) {
  const std::string where(what);
  KILN_ASSIGN_OR_RETURN(nlohmann::json j,
                        parse_json_bounded(json, {kRaceJsonBytesMax, kJsonDepthMaxDefault}, where));
  if (!j.is_object()) return Status::invalid_argument(where + ": not a JSON object");
  GemmRace r;
  const char* field = "machine";
  try {
    r.machine = j.at(field).get<std::string>();
    field = "cpu_model";
    r.cpu_model = j.at(field).get<std::string>();
    field = "openblas_core";
    r.openblas_core = j.at(field).get<std::string>();
    field = "onednn_version";
    r.onednn_version = j.at(field).get<std::string>();
    field = "openblas_gflops";
    r.openblas_gflops = j.at(field).get<double>();
    field = "onednn_gflops";
    r.onednn_gflops = j.at(field).get<double>();
    field = "onednn_over_openblas";
    r.onednn_over_openblas = j.at(field).get<double>();
    field = "measured_at";
    r.measured_at = j.at(field).get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(where + ": field " + field + ": " + e.what());
  }
  for (auto [name, value] : {std::pair{"openblas_gflops", r.openblas_gflops},
                             std::pair{"onednn_gflops", r.onednn_gflops},
                             std::pair{"onednn_over_openblas", r.onednn_over_openblas}}) {
    if (!(value > 0 && value < kGflopsMax)) {
      return Status::invalid_argument(where + ": field " + name + ": not in (0, 1e6) GFLOP/s");
    }
  }
  return r;
}

Result<GemmChoice> process_gemm_choice() {
  // The one process-wide answer: every Context of the process uses the same library, so a
  // process computes like itself throughout (made once; the race or cache read is not repeated).
  static std::once_flag once;
  static Result<GemmChoice>* choice = nullptr;  // never destroyed (read by any later call)
  std::call_once(once, [] { choice = new Result<GemmChoice>(choose_now()); });
  return *choice;
}

}  // namespace kiln::ops
