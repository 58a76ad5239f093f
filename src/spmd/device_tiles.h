// Internal to the partitioner: each device's tile index of an array, held as
// an explicit table. The gather and scatter handlers combine the tilings of
// arrays that do not share a tile assignment (an operand split over
// ("tensor", "fsdp"), indices split over ("data", "fsdp")): a table per array
// says what each device holds, the result's tiling is read off the operands'
// tables, and a candidate is valid when the table is a sharding (every tile
// held by the same number of devices).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "weft/sharding/hlo_sharding.h"

namespace weft::spmd {

struct DeviceTiles {
  std::vector<int64_t> counts;  // tiles per dim
  std::vector<int32_t> index;   // [device * rank() + dim], flat (one table, not one per device)

  // The tiles of `sharding` (replicated: one tile) for an array of `rank`.
  static DeviceTiles Of(const HloSharding& sharding, int64_t rank, int64_t num_devices);
  // Dim d follows dim from[d] of `src` (-1: one tile).
  static DeviceTiles Map(const DeviceTiles& src, const std::vector<int64_t>& from);
  // Dim d follows dim from_b[d] of `b` where that is >= 0, else dim
  // from_a[d] of `a` (-1 in both: one tile). How a gather's result reads its
  // batch dims off the indices and its slice dims off the table.
  static DeviceTiles Join(const DeviceTiles& a, const std::vector<int64_t>& from_a,
                          const DeviceTiles& b, const std::vector<int64_t>& from_b);

  int64_t rank() const { return static_cast<int64_t>(counts.size()); }
  int64_t num_devices() const { return num_devices_; }
  int64_t at(int64_t device, int64_t d) const { return index[device * rank() + d]; }
  // The table as one row per device (tests).
  std::vector<std::vector<int64_t>> Rows() const;
  void SetRows(const std::vector<std::vector<int64_t>>& rows);
  int64_t NumTiles() const;
  // Row-major tile number of `device`.
  int64_t Flat(int64_t device) const;
  // Dim d in m tiles (m divides counts[d]): tile i becomes i / (counts[d] / m),
  // so each device's new tile contains its old one (an all-gather away).
  void Coarsen(int64_t d, int64_t m);
  // Dim d whole.
  void Unsplit(int64_t d) { Coarsen(d, 1); }

  // The sharding, or nullopt when the tiles are not held by equally many devices.
  std::optional<HloSharding> ToSharding() const;

  bool operator==(const DeviceTiles&) const = default;

  int64_t num_devices_ = 0;
};

// Replica groups that combine partial results: the devices holding the same
// tile of `result`, split into groups holding every tile of `key` once each
// (members ordered by key tile, row-major). nullopt when some result tile's
// holders do not hold every key tile equally often.
std::optional<std::vector<std::vector<int64_t>>> GroupsOverKey(const DeviceTiles& result,
                                                               const DeviceTiles& key);

// The inverse of a dim map: for an array of `rank` dims whose dims come from
// another array's (`from[d]`, -1: none), which dim of this array each of
// those dims feeds (-1: none). Map(x, Inverse(from, rank)) carries tiles back.
std::vector<int64_t> Inverse(const std::vector<int64_t>& from, int64_t rank);

// Coarsenings of `base` along `dims`, the finest (base itself) first. Each
// dim of n tiles keeps n, becomes whole (1), or — for each tile count h of
// the other arrays a plan combines (`hints`) that divides n — h or n / h
// tiles: coarsened just enough to free the devices another array's split
// needs. (Every divisor would be a search over all of them per dim:
// thousands of candidates, each O(devices), on a 65,536-chip mesh.) With no
// hints, every divisor.
std::vector<DeviceTiles> Coarsenings(const DeviceTiles& base, const std::vector<int64_t>& dims,
                                     const std::vector<int64_t>& hints = {});

// The tile counts above 1 of these arrays (hints for Coarsenings).
std::vector<int64_t> TileCounts(std::initializer_list<const DeviceTiles*> arrays);

}  // namespace weft::spmd
