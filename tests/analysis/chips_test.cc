// The chips table: the shipped file's chips and their sources, and errors
// that name the file and what is known.
#include "weft/analysis/chips.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "weft/base/error.h"

namespace weft::analysis {
namespace {

const std::filesystem::path kChips = std::filesystem::path(WEFT_SOURCE_DIR) / "configs/chips.toml";

std::string ErrorOf(std::string_view text) {
  try {
    ParseChipTable(text, "test.toml");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ChipsTest, ShippedTableHasTheIssuesChipsWithSources) {
  const ChipTable table = LoadChipTable(kChips);
  for (const char* name : {"v5e", "v5p", "v6e", "h100", "h200", "local-cpu"}) {
    const Chip& c = table.Find(name);
    EXPECT_FALSE(c.source.empty()) << name;
    EXPECT_GT(c.hbm_bytes, 1e9) << name;
    EXPECT_GT(c.peak_flops_bf16, 0) << name;
    EXPECT_GT(c.ici_bytes_per_s, c.dcn_bytes_per_s * 0.99) << name;
  }
  const Chip& v6e = table.Find("v6e");
  EXPECT_DOUBLE_EQ(v6e.hbm_bytes, 32e9);
  EXPECT_DOUBLE_EQ(v6e.peak_flops_bf16, 918e12);
  EXPECT_EQ(v6e.max_slice_chips, 256);
  EXPECT_NE(v6e.source.find("cloud.google.com/tpu/docs/v6e"), std::string::npos);
  EXPECT_DOUBLE_EQ(table.Find("v5p").hbm_bytes, 95.0 * 1073741824.0);  // GiB
  EXPECT_NE(table.Find("local-cpu").source.find("weft bench peak"), std::string::npos);
}

TEST(ChipsTest, UnknownChipNamesTheFileAndListsTheKnownOnes) {
  const ChipTable table = LoadChipTable(kChips);
  try {
    table.Find("v7x");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("unknown chip 'v7x'"), std::string::npos) << what;
    EXPECT_NE(what.find("chips.toml"), std::string::npos) << what;
    EXPECT_NE(what.find("v5e, v5p, v6e, h100, h200, local-cpu"), std::string::npos) << what;
  }
}

constexpr const char* kGood = R"([chips.x]
hbm_gb = 16
peak_tflops_bf16 = 100
peak_tflops_f32 = 50
ici_gbytes_per_s = 100
dcn_gbytes_per_s = 10
host_gbytes_per_s = 10
max_slice_chips = 64
hbm_gbytes_per_s = 1000
ici_topology = "switch"
source = "made up"
)";

TEST(ChipsTest, BadEntriesAreErrorsWithLocations) {
  EXPECT_EQ(ErrorOf(kGood), "(no error)");
  std::string typo = kGood;
  typo.replace(typo.find("hbm_gb"), 6, "hbm_gbb");
  EXPECT_NE(ErrorOf(typo).find("test.toml:2:1: unknown key 'hbm_gbb'"), std::string::npos)
      << ErrorOf(typo);
  std::string both = std::string(kGood) + "hbm_gib = 15\n";
  EXPECT_NE(ErrorOf(both).find("exactly one of hbm_gb and hbm_gib"), std::string::npos);
  std::string no_source = kGood;
  no_source.erase(no_source.find("source"));
  EXPECT_NE(ErrorOf(no_source).find("missing the required key 'source'"), std::string::npos);
  std::string negative = kGood;
  negative.replace(negative.find("= 100"), 5, "= -1");
  EXPECT_NE(ErrorOf(negative).find("must be positive"), std::string::npos) << ErrorOf(negative);
  EXPECT_NE(ErrorOf("[chips.x\n").find("test.toml:1"), std::string::npos) << ErrorOf("[chips.x\n");
  EXPECT_NE(ErrorOf("chip = 1\n").find("unknown top-level key 'chip'"), std::string::npos);
  EXPECT_THROW(LoadChipTable("/nonexistent/chips.toml"), Error);
  try {
    LoadChipTable(std::filesystem::temp_directory_path());
    FAIL() << "a directory is not a chips file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  // --chips-file /dev/zero was read until memory ran out.
  try {
    LoadChipTable("/dev/zero");
    FAIL() << "a device is not a chips file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chips file /dev/zero is a character device"),
              std::string::npos)
        << e.what();
  }
}

TEST(ChipsTest, SimulationKeysParseAndBadOnesAreErrors) {
  const std::string torus = std::string(kGood) +
                            "ici_links = 4\nmatrix_tile = [8, 256, 256]\nmatrix_efficiency = "
                            "0.5\nvector_tflops = 10\nici_latency_us = 2\ndcn_latency_us = 30\n";
  std::string t = torus;
  t.replace(t.find("\"switch\""), 8, "\"torus2d\"");
  const Chip c = ParseChipTable(t, "test.toml").Find("x");
  EXPECT_EQ(c.ici_topology, Chip::Topology::kTorus2d);
  EXPECT_EQ(c.ici_links, 4);
  EXPECT_EQ(c.matrix_tile, (std::array<int64_t, 3>{8, 256, 256}));
  EXPECT_DOUBLE_EQ(c.matrix_efficiency, 0.5);
  EXPECT_DOUBLE_EQ(c.vector_flops, 10e12);
  EXPECT_DOUBLE_EQ(c.hbm_bytes_per_s, 1000e9);
  EXPECT_DOUBLE_EQ(c.ici_latency_s, 2e-6);
  EXPECT_DOUBLE_EQ(c.dcn_latency_s, 30e-6);
  const Chip plain = ParseChipTable(kGood, "test.toml").Find("x");
  EXPECT_EQ(plain.matrix_tile, (std::array<int64_t, 3>{1, 1, 1}));
  EXPECT_DOUBLE_EQ(plain.matrix_efficiency, 1);
  EXPECT_EQ(plain.vector_flops, 0);

  std::string no_links = kGood;
  no_links.replace(no_links.find("\"switch\""), 8, "\"torus3d\"");
  EXPECT_NE(ErrorOf(no_links).find("missing the required key 'ici_links'"), std::string::npos)
      << ErrorOf(no_links);
  std::string ring = kGood;
  ring.replace(ring.find("\"switch\""), 8, "\"ring\"");
  EXPECT_NE(ErrorOf(ring).find("ici_topology of chip 'x' must be"), std::string::npos);
  EXPECT_NE(ErrorOf(std::string(kGood) + "matrix_tile = [8, 0, 128]\n").find("three positive"),
            std::string::npos);
  EXPECT_NE(ErrorOf(std::string(kGood) + "matrix_efficiency = 1.5\n").find("in (0, 1]"),
            std::string::npos);
  EXPECT_NE(ErrorOf(std::string(kGood) + "cache_mb = 8\n").find("both cache_mb and"),
            std::string::npos);
  const Chip cached =
      ParseChipTable(std::string(kGood) + "cache_mb = 8\ncache_gbytes_per_s = 90\n", "test.toml")
          .Find("x");
  EXPECT_DOUBLE_EQ(cached.cache_bytes, 8e6);
  EXPECT_DOUBLE_EQ(cached.cache_bytes_per_s, 90e9);
  std::string no_bandwidth = kGood;
  no_bandwidth.erase(no_bandwidth.find("hbm_gbytes_per_s"),
                     std::string("hbm_gbytes_per_s = 1000\n").size());
  EXPECT_NE(ErrorOf(no_bandwidth).find("missing the required key 'hbm_gbytes_per_s'"),
            std::string::npos);
}

}  // namespace
}  // namespace weft::analysis
