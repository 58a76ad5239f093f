#include "weft/sharding/tile_assignment.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "weft/base/error.h"
#include "weft/sharding/hlo_sharding.h"

namespace weft {
namespace {

// Brute-force reshape(transpose(iota(reshape), perm), dims), written
// independently of the library (index arithmetic on the transposed array).
std::vector<int64_t> NaiveIota(const std::vector<int64_t>& reshape,
                               const std::vector<int64_t>& perm) {
  const size_t rank = reshape.size();
  int64_t n = 1;
  for (int64_t r : reshape) n *= r;
  std::vector<int64_t> out;
  std::vector<int64_t> tdims(rank);
  for (size_t i = 0; i < rank; ++i) tdims[i] = reshape[perm[i]];
  for (int64_t flat = 0; flat < n; ++flat) {
    // Unravel `flat` over the transposed dims, then ravel over the original.
    std::vector<int64_t> tindex(rank);
    int64_t rest = flat;
    for (int64_t i = rank - 1; i >= 0; --i) {
      tindex[i] = rest % tdims[i];
      rest /= tdims[i];
    }
    std::vector<int64_t> index(rank);
    for (size_t i = 0; i < rank; ++i) index[perm[i]] = tindex[i];
    int64_t value = 0;
    for (size_t i = 0; i < rank; ++i) value = value * reshape[i] + index[i];
    out.push_back(value);
  }
  return out;
}

TEST(TileAssignmentTest, IotaMatchesExplicitDeviceLists) {
  EXPECT_EQ(TileAssignment::Iota({4, 2}, {2, 4}, {1, 0}).devices(),
            (std::vector<int64_t>{0, 4, 1, 5, 2, 6, 3, 7}));
  EXPECT_EQ(HloSharding::Parse("{devices=[4,2]<=[2,4]T(1,0)}"),
            HloSharding::Parse("{devices=[4,2]0,4,1,5,2,6,3,7}"));
  EXPECT_EQ(HloSharding::Parse("{devices=[2,2,2]<=[2,2,2]T(2,0,1)}"),
            HloSharding::Parse("{devices=[2,2,2]0,2,4,6,1,3,5,7}"));

  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    const int rank = 1 + rng() % 4;
    std::vector<int64_t> reshape(rank), perm(rank);
    for (int i = 0; i < rank; ++i) reshape[i] = 1 + rng() % 4;
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const int64_t n =
        std::accumulate(reshape.begin(), reshape.end(), int64_t{1}, std::multiplies<>());
    TileAssignment iota = TileAssignment::Iota({n}, reshape, perm);
    const std::vector<int64_t> expected = NaiveIota(reshape, perm);
    ASSERT_EQ(iota.devices(), expected);
    ASSERT_TRUE(iota.is_iota());
    // The explicit list is recognised as an iota, and the compact form it
    // prints parses back to the same devices.
    TileAssignment detected = TileAssignment({n}, expected).AsIotaIfPossible();
    ASSERT_TRUE(detected.is_iota());
    ASSERT_EQ(detected, iota);
    HloSharding s = HloSharding::Parse(fmt::format("{{{}}}", detected.ToString()));
    ASSERT_EQ(s.tile_assignment().devices(), expected) << detected.ToString();
  }
}

TEST(TileAssignmentTest, NonIotaListsStayExplicit) {
  EXPECT_FALSE(TileAssignment({4}, {0, 2, 3, 1}).AsIotaIfPossible().is_iota());
  EXPECT_FALSE(TileAssignment({4}, {1, 0, 2, 3}).AsIotaIfPossible().is_iota());
  EXPECT_FALSE(TileAssignment({2}, {4, 5}).AsIotaIfPossible().is_iota());
  // A transpose of an iota that no iota form describes falls back to a list.
  TileAssignment odd = TileAssignment::Iota({2, 3}, {2, 3}, {1, 0});
  TileAssignment t = odd.Transpose(std::vector<int64_t>{1, 0});
  EXPECT_EQ(t.devices(), (std::vector<int64_t>{0, 4, 3, 2, 1, 5}));
  EXPECT_FALSE(t.is_iota());
}

TEST(TileAssignmentTest, TransposeAndReshapeKeepDevices) {
  TileAssignment t({2, 3}, {5, 4, 3, 2, 1, 0});
  TileAssignment tt = t.Transpose(std::vector<int64_t>{1, 0});
  EXPECT_EQ(tt.dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(tt.devices(), (std::vector<int64_t>{5, 2, 4, 1, 3, 0}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      std::vector<int64_t> a{i, j}, b{j, i};
      EXPECT_EQ(t(a), tt(b));
    }
  }
  EXPECT_EQ(t.Reshape({6}).devices(), t.devices());
  EXPECT_EQ(*t.IndexOf(1), (std::vector<int64_t>{1, 1}));
  EXPECT_FALSE(t.IndexOf(9).has_value());
}

TEST(TileAssignmentTest, RejectsBadDeviceLists) {
  EXPECT_THROW(TileAssignment({2, 2}, {0, 1, 2}), Error);
  EXPECT_THROW(TileAssignment({2}, {0, 0}), Error);
  EXPECT_THROW(TileAssignment({2}, {0, -1}), Error);
  EXPECT_THROW(TileAssignment::Iota({4}, {2, 2}, {0, 0}), Error);
  EXPECT_THROW(TileAssignment::Iota({4}, {2, 3}, {0, 1}), Error);
}

TEST(TileAssignmentTest, PrintsBothForms) {
  EXPECT_EQ(TileAssignment({2, 2}, {3, 1, 2, 0}).ToString(), "devices=[2,2]3,1,2,0");
  EXPECT_EQ(TileAssignment::Iota({4, 2}).ToString(), "devices=[4,2]<=[8]");
  EXPECT_EQ(TileAssignment::Iota({4, 2}, {2, 4}, {1, 0}).ToString(), "devices=[4,2]<=[2,4]T(1,0)");
  EXPECT_EQ(TileAssignment::Iota({4, 2}, {2, 4}, {1, 0}).AsExplicit().ToString(),
            "devices=[4,2]0,4,1,5,2,6,3,7");
  EXPECT_EQ(TileAssignment::Iota({1}).ToString(), "devices=[1]<=[1]");
}

// At most kMaxDevices devices, ids below it; dims whose product overflows
// int64 are refused, not wrapped.
TEST(TileAssignmentTest, DeviceCountsAreBounded) {
  EXPECT_EQ(DeviceCountWithin(std::vector<int64_t>{256, 256}), 65536);
  EXPECT_EQ(DeviceCountWithin(std::vector<int64_t>{256, 257}), std::nullopt);
  EXPECT_EQ(DeviceCountWithin(std::vector<int64_t>{4294967296, 4294967296}), std::nullopt);
  EXPECT_EQ(DeviceCountWithin(std::vector<int64_t>{2, 0}), std::nullopt);
  EXPECT_EQ(DeviceCountWithin(std::vector<int64_t>{3, 3}, 8), std::nullopt);
  EXPECT_EQ(DeviceCountWithin(std::vector<int64_t>{}), 1);
  EXPECT_EQ(TileAssignment::Iota({kMaxDevices}).num_elements(), kMaxDevices);
  EXPECT_THROW(TileAssignment::Iota({kMaxDevices + 1}), Error);
  EXPECT_THROW(TileAssignment::Iota({1000000000}), Error);
  EXPECT_THROW(TileAssignment::Iota({2, 2}, {1000000000}, {0}), Error);
  // 2^32 x 2^32 wraps to 0 in int64: must not pass for a 0- or 1-device list.
  EXPECT_THROW(TileAssignment({4294967296, 4294967296}, {0}), Error);
  EXPECT_THROW(TileAssignment({2}, {0, kMaxDevices}), Error);
  EXPECT_THROW(TileAssignment::Iota({4}).Reshape({4294967296, 4294967296, 4}), Error);
}

// The iota form is never expanded: every operation on it agrees with the same
// operation on the explicit list, on random dims, reshapes and transposes.
TEST(TileAssignmentTest, IotaFormAgreesWithTheExpandedList) {
  std::mt19937 rng(12);
  const std::vector<int64_t> factors = {1, 2, 2, 3, 4};
  for (int trial = 0; trial < 400; ++trial) {
    // Random reshape dims and transpose of the iota.
    std::vector<int64_t> reshape;
    const int rank = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < rank; ++i) reshape.push_back(factors[rng() % factors.size()]);
    std::vector<int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    const int64_t n =
        std::accumulate(reshape.begin(), reshape.end(), int64_t{1}, std::multiplies<>());
    // Random dims of the same count: split n into random divisors.
    std::vector<int64_t> dims;
    int64_t left = n;
    while (left > 1 && dims.size() < 4) {
      std::vector<int64_t> divisors;
      for (int64_t d = 1; d <= left; ++d) {
        if (left % d == 0) divisors.push_back(d);
      }
      const int64_t d = divisors[rng() % divisors.size()];
      dims.push_back(d);
      left /= d;
    }
    dims.push_back(left);
    const std::vector<int64_t> expected = NaiveIota(reshape, perm);
    const TileAssignment iota = TileAssignment::Iota(dims, reshape, perm);
    const TileAssignment list(dims, expected);
    SCOPED_TRACE(iota.ToString());
    ASSERT_TRUE(iota.is_iota());
    ASSERT_FALSE(list.is_iota());
    // Device at each position, and the position of each device.
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(iota.DeviceAt(i), expected[i]);
      EXPECT_EQ(iota.IndexOf(expected[i]), list.IndexOf(expected[i]));
    }
    EXPECT_EQ(iota.IndexOf(n), std::nullopt);
    // The all-devices table agrees with IndexOf, in both forms.
    for (const TileAssignment* ta : {&iota, &list}) {
      const auto table = ta->IndexTable();
      ASSERT_EQ(static_cast<int64_t>(table->size()), n * ta->num_dims());
      for (int64_t device = 0; device < n; ++device) {
        const std::vector<int64_t> row(table->begin() + device * ta->num_dims(),
                                       table->begin() + (device + 1) * ta->num_dims());
        EXPECT_EQ(row, *ta->IndexOf(device));
      }
    }
    // Equality and hashing across forms.
    EXPECT_EQ(iota, list);
    EXPECT_EQ(list, iota);
    EXPECT_EQ(iota.Hash(), list.Hash());
    EXPECT_EQ(iota.Hash(), list.AsIotaIfPossible().Hash());
    EXPECT_EQ(iota.devices(), expected);
    EXPECT_EQ(list.AsIotaIfPossible().ToString(), iota.ToString());
    // Transpose: same devices as the list's, and an iota when the dims split
    // the form into whole digits.
    std::vector<int64_t> tperm(dims.size());
    std::iota(tperm.begin(), tperm.end(), 0);
    std::shuffle(tperm.begin(), tperm.end(), rng);
    const TileAssignment t = iota.Transpose(tperm);
    EXPECT_EQ(t, list.Transpose(tperm));
    EXPECT_EQ(t.devices(), list.Transpose(tperm).devices());
    EXPECT_EQ(t.Hash(), list.Transpose(tperm).Hash());
    // Reshape keeps the form.
    const TileAssignment r = iota.Reshape({n});
    EXPECT_TRUE(r.is_iota());
    EXPECT_EQ(r.devices(), expected);
    // Sorted replication groups.
    std::vector<int64_t> sorted = expected;
    for (int64_t i = 0; i < n; i += dims.back()) {
      std::sort(sorted.begin() + i, sorted.begin() + i + dims.back());
    }
    EXPECT_EQ(iota.SortMinorGroups().devices(), sorted);
    EXPECT_EQ(list.SortMinorGroups(), iota.SortMinorGroups());
    // Print / parse round trip, both forms.
    for (const TileAssignment& ta : {iota, list, t}) {
      const HloSharding parsed = HloSharding::Parse("{" + ta.ToString() + "}");
      EXPECT_EQ(parsed.tile_assignment(), ta);
      EXPECT_EQ(parsed.tile_assignment().ToString(), ta.ToString());
    }
  }
}

// Device ids need not be 0..N-1: absent ids get -1 rows, and a table asked
// for again (kept among the recent ones) is the same one.
TEST(TileAssignmentTest, IndexTableMarksAbsentDevices) {
  const TileAssignment ta({2, 2}, {7, 3, 5, 0});
  const auto table = ta.IndexTable();
  ASSERT_EQ(table->size(), 8u * 2u);
  const std::vector<int64_t> expected = {1, 1, -1, -1, -1, -1, 0, 1, -1, -1, 1, 0, -1, -1, 0, 0};
  EXPECT_EQ(*table, expected);
  EXPECT_EQ(ta.IndexTable(), table);
  // Equal assignments in the other form share the kept table's contents.
  const TileAssignment iota = TileAssignment::Iota({4, 2}, {2, 4}, {1, 0});
  const TileAssignment list = iota.AsExplicit();
  EXPECT_EQ(*iota.IndexTable(), *list.IndexTable());
  for (int64_t device = 0; device < 8; ++device) {
    const auto row = list.IndexOf(device);
    EXPECT_EQ((*iota.IndexTable())[device * 2], (*row)[0]);
    EXPECT_EQ((*iota.IndexTable())[device * 2 + 1], (*row)[1]);
  }
}

// A 65,536-device mesh stays in the compact form through what the planner
// does with it (transpose, reshape, sort groups, compare, hash, index).
TEST(TileAssignmentTest, LargeMeshStaysCompact) {
  const TileAssignment mesh = TileAssignment::Iota({8192, 8});
  const TileAssignment t = mesh.Transpose(std::vector<int64_t>{1, 0});
  EXPECT_EQ(t.ToString(), "devices=[8,8192]<=[8192,8]T(1,0)");
  const TileAssignment r = t.Reshape({8, 64, 128}).Transpose(std::vector<int64_t>{1, 0, 2});
  EXPECT_TRUE(r.is_iota());
  EXPECT_EQ(r.DeviceAt(1), 8);
  EXPECT_EQ(r.DeviceAt(128), 1);
  EXPECT_EQ(*r.IndexOf(65535), (std::vector<int64_t>{63, 7, 127}));
  EXPECT_TRUE(r.SortMinorGroups().is_iota());
  EXPECT_NE(r, t.Reshape({8, 64, 128}));
  EXPECT_EQ(t.Transpose(std::vector<int64_t>{1, 0}), mesh);
  // A transpose that cuts through a digit falls back to the list, correctly.
  const TileAssignment odd = TileAssignment::Iota({4, 6}, {6, 4}, {1, 0}).Reshape({6, 4});
  EXPECT_EQ(odd.Transpose(std::vector<int64_t>{1, 0}),
            odd.AsExplicit().Transpose(std::vector<int64_t>{1, 0}));
}

}  // namespace
}  // namespace weft
