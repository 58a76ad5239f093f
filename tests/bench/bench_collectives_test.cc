// `weft bench collectives`: runs the weft binary on a few small sizes and
// checks that its JSON lists every collective at every size with sane
// values (structure, not speed).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "run_weft.h"

namespace {

using weft::testing::Output;
using weft::testing::RunWeft;

TEST(BenchCollectivesTest, JsonListsEveryCollectiveAtEverySize) {
  const Output o = RunWeft("bench collectives --json --min-bytes 4096 --max-bytes 65536");
  ASSERT_EQ(o.exit_code, 0) << o.err << o.out;
  const nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "not one JSON object:\n" << o.out;
  EXPECT_EQ(j.at("backend"), "threads");
  EXPECT_EQ(j.at("devices"), 4);
  std::map<std::string, std::set<int64_t>> sizes;
  for (const nlohmann::json& r : j.at("results")) {
    const std::string name = r.at("collective");
    const int64_t bytes = r.at("bytes");
    sizes[name].insert(bytes);
    EXPECT_GT(r.at("time_us").get<double>(), 0) << name << " " << bytes;
    // algbw is size / time; busbw the ring factor 2(n-1)/n or (n-1)/n of it.
    const double algbw = r.at("algbw_gbs"), busbw = r.at("busbw_gbs");
    EXPECT_NEAR(algbw, bytes / (r.at("time_us").get<double>() * 1e-6) / 1e9, 1e-6 * algbw) << name;
    EXPECT_NEAR(busbw / algbw, name == "all-reduce" ? 1.5 : 0.75, 1e-9) << name;
    EXPECT_GT(r.at("memcpy_gbs").get<double>(), 0) << name;
  }
  const std::set<int64_t> want{4096, 16384, 65536};
  for (const char* name :
       {"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "all-to-all in place"}) {
    EXPECT_EQ(sizes[name], want) << name;
  }
  EXPECT_EQ(sizes.size(), 5u);
}

TEST(BenchCollectivesTest, AnEmptySizeRangeIsRefused) {
  const Output o = RunWeft("bench collectives --min-bytes 65536 --max-bytes 4096");
  EXPECT_EQ(o.exit_code, 2) << o.err << o.out;
  EXPECT_NE(o.err.find("not a range"), std::string::npos) << o.err;
}

}  // namespace
