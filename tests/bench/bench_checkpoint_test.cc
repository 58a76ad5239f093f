// `weft bench checkpoint`: runs the weft binary on the micro config and
// checks that its JSON has every field with sane values (structure, not
// speed).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "run_weft.h"

namespace {

using weft::testing::Output;
using weft::testing::RunWeft;

const std::string kMicro = std::string(WEFT_SOURCE_DIR) + "/tests/train/data/micro.toml";

TEST(BenchCheckpointTest, JsonOfOneMicroRunHasEveryFieldWithSaneValues) {
  const Output o = RunWeft("bench checkpoint '" + kMicro + "' --reps 1 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err << o.out;
  const nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "not one JSON object:\n" << o.out;
  EXPECT_EQ(j.at("devices"), 4);
  EXPECT_EQ(j.at("mesh"), "fsdp=2,tensor=2");
  EXPECT_EQ(j.at("load_mesh"), "fsdp=4,tensor=1");
  // micro's 43,168 parameters and two moments as float32, with headers.
  EXPECT_GT(j.at("bytes").get<double>(), 3 * 43168 * 4);
  EXPECT_LT(j.at("bytes").get<double>(), 3 * 43168 * 4 + 200000);
  for (const char* key :
       {"disk_write_mb_per_s", "disk_read_mb_per_s", "save_mb_per_s", "load_same_mesh_mb_per_s",
        "load_other_mesh_mb_per_s", "save_fraction_of_disk_write", "load_same_fraction_of_read",
        "load_other_fraction_of_read"}) {
    EXPECT_GT(j.at(key).get<double>(), 0) << key;
  }
}

TEST(BenchCheckpointTest, AnUnwritableDirIsRefusedByName) {
  const Output o = RunWeft("bench checkpoint '" + kMicro + "' --dir /proc/weft_no_such_dir");
  EXPECT_EQ(o.exit_code, 2) << o.err << o.out;
  EXPECT_NE(o.err.find("--dir"), std::string::npos) << o.err;
}

}  // namespace
