// Issue 11: kiln_ops runs the GEMM library that measures faster on the machine, and says which.
#include <kiln/ops/gemm_library.h>

#include <gtest/gtest.h>

#include <kiln/base/machine_cache.h>

namespace kiln::ops {
namespace {

GemmRace race_of(double openblas, double onednn) {
  GemmRace r;
  r.machine = "0b5e9c1e-5d8e-4a77-9a43-6f4f1f0e2c11";
  r.cpu_model = "GenuineIntel family 6 model 207: Intel(R) Xeon(R) Processor";
  r.openblas_core = "Cooperlake";
  r.onednn_version = "2.6.3";
  r.openblas_gflops = openblas;
  r.onednn_gflops = onednn;
  r.onednn_over_openblas = onednn / openblas;
  r.measured_at = "2026-12-02T06:00:00Z";
  return r;
}

TEST(GemmLibraryTest, OneDnnOnlyWhenItIsClearlyFaster) {
  // The paired-run median decides, not the best times.
  GemmRace mixed = race_of(100, 130);
  mixed.onednn_over_openblas = 1.01;
  EXPECT_EQ(choose_gemm_library(mixed), GemmLibrary::kOpenBlas);
  EXPECT_EQ(choose_gemm_library(race_of(100, 120)), GemmLibrary::kOneDnn);
  EXPECT_EQ(choose_gemm_library(race_of(100, 103)), GemmLibrary::kOneDnn);
  // Within the race's noise the library already linked and forced to the right core stays.
  EXPECT_EQ(choose_gemm_library(race_of(100, 102.9)), GemmLibrary::kOpenBlas);
  EXPECT_EQ(choose_gemm_library(race_of(213, 150)), GemmLibrary::kOpenBlas);
}

TEST(GemmLibraryTest, NamesParseAndABadOneSaysWhatIsAccepted) {
  for (GemmLibrary g : {GemmLibrary::kOpenBlas, GemmLibrary::kOneDnn})
    EXPECT_EQ(*parse_gemm_library(gemm_library_name(g)), g);
  EXPECT_EQ(parse_gemm_library("mkl").status().message(),
            "'mkl' is not a GEMM library: openblas, onednn or auto");
}

TEST(GemmLibraryTest, RacesRoundTripThroughJsonAndABadFieldIsNamed) {
  const GemmRace r = race_of(104.5, 125.25);
  Result<GemmRace> back = gemm_race_from_json(gemm_race_to_json(r), "g.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(gemm_race_to_json(*back), gemm_race_to_json(r));
  GemmRace zero = race_of(1, 1);
  zero.openblas_gflops = 0;
  EXPECT_EQ(gemm_race_from_json(gemm_race_to_json(zero), "g.json").status().message(),
            "g.json: field openblas_gflops: not in (0, 1e6) GFLOP/s");
  const Status missing = gemm_race_from_json(R"({"machine": "m"})", "g.json").status();
  EXPECT_NE(missing.message().find("g.json: field cpu_model"), std::string::npos)
      << missing.message();
}

// A real race on this machine: both libraries ran, agreed on exact inputs (else kCorruption),
// and the record says where and what ran.
TEST(GemmLibraryTest, TheRaceRunsBothLibrariesOnThisMachine) {
  Result<GemmRace> r = race_gemm_libraries();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_GT(r->openblas_gflops, 0);
  EXPECT_GT(r->onednn_gflops, 0);
  EXPECT_GT(r->onednn_over_openblas, 0);
  EXPECT_EQ(r->machine, this_boot_id());
  EXPECT_FALSE(r->openblas_core.empty());
  EXPECT_EQ(r->onednn_version.substr(0, 2), "2.");
}

}  // namespace
}  // namespace kiln::ops
