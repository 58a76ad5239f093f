#include "device_tiles.h"

#include <algorithm>
#include <map>

#include "weft/base/error.h"

namespace weft::spmd {

DeviceTiles DeviceTiles::Of(const HloSharding& sharding, int64_t rank, int64_t num_devices) {
  DeviceTiles t;
  t.counts.assign(rank, 1);
  t.index.assign(num_devices, std::vector<int64_t>(rank, 0));
  if (!sharding.IsTiled()) return t;
  t.counts = sharding.TilesPerDim();
  WEFT_CHECK(static_cast<int64_t>(t.counts.size()) == rank, "internal: sharding {} for rank {}",
             sharding.ToString(), rank);
  for (int64_t d = 0; d < num_devices; ++d) t.index[d] = sharding.TileIndexForDevice(d);
  return t;
}

DeviceTiles DeviceTiles::Map(const DeviceTiles& src, const std::vector<int64_t>& from) {
  DeviceTiles t;
  const int64_t rank = static_cast<int64_t>(from.size());
  t.counts.assign(rank, 1);
  t.index.assign(src.num_devices(), std::vector<int64_t>(rank, 0));
  for (int64_t d = 0; d < rank; ++d) {
    if (from[d] < 0) continue;
    t.counts[d] = src.counts.at(from[d]);
    for (int64_t dev = 0; dev < src.num_devices(); ++dev) t.index[dev][d] = src.index[dev][from[d]];
  }
  return t;
}

DeviceTiles DeviceTiles::Join(const DeviceTiles& a, const std::vector<int64_t>& from_a,
                              const DeviceTiles& b, const std::vector<int64_t>& from_b) {
  WEFT_CHECK(from_a.size() == from_b.size(), "internal: joining dim maps of {} and {} dims",
             from_a.size(), from_b.size());
  DeviceTiles t = Map(a, from_a);
  for (int64_t d = 0; d < t.rank(); ++d) {
    if (from_b[d] < 0) continue;
    t.counts[d] = b.counts.at(from_b[d]);
    for (int64_t dev = 0; dev < t.num_devices(); ++dev) t.index[dev][d] = b.index[dev][from_b[d]];
  }
  return t;
}

std::vector<int64_t> Inverse(const std::vector<int64_t>& from, int64_t rank) {
  std::vector<int64_t> inverse(rank, -1);
  for (int64_t d = 0; d < static_cast<int64_t>(from.size()); ++d) {
    if (from[d] >= 0) inverse.at(from[d]) = d;
  }
  return inverse;
}

int64_t DeviceTiles::NumTiles() const {
  int64_t n = 1;
  for (int64_t c : counts) n *= c;
  return n;
}

int64_t DeviceTiles::Flat(int64_t device) const {
  int64_t flat = 0;
  for (int64_t d = 0; d < rank(); ++d) flat = flat * counts[d] + index[device][d];
  return flat;
}

void DeviceTiles::Coarsen(int64_t d, int64_t m) {
  WEFT_CHECK(m >= 1 && counts.at(d) % m == 0, "internal: {} tiles do not coarsen to {}",
             counts.at(d), m);
  const int64_t step = counts[d] / m;
  counts[d] = m;
  for (std::vector<int64_t>& i : index) i[d] /= step;
}

std::optional<HloSharding> DeviceTiles::ToSharding() const {
  const int64_t tiles = NumTiles();
  if (tiles == 1) return HloSharding::Replicate();
  // Each tile's holders, ascending, tile by tile: counted first, then placed
  // (no list per tile: a large mesh has as many tiles as devices, and the
  // gather and scatter planners call this for every candidate).
  const int64_t n = num_devices();
  // More tiles than devices (a join of two tilings can count far more): some
  // tile has no holder, so this is no sharding.
  if (tiles > n) return std::nullopt;
  std::vector<int64_t> flat(n), held(tiles, 0);
  for (int64_t dev = 0; dev < n; ++dev) ++held[flat[dev] = Flat(dev)];
  const int64_t k = held[0];
  if (k == 0 || tiles * k != n) return std::nullopt;
  for (int64_t h : held) {
    if (h != k) return std::nullopt;
  }
  std::vector<int64_t> devices(n);
  std::vector<int64_t>& next = held;  // reused: the next free slot of each tile
  for (int64_t t = 0; t < tiles; ++t) next[t] = t * k;
  for (int64_t dev = 0; dev < n; ++dev) devices[next[flat[dev]]++] = dev;
  std::vector<int64_t> dims = counts;
  if (k == 1) return HloSharding::Tile(TileAssignment(std::move(dims), std::move(devices)));
  dims.push_back(static_cast<int64_t>(k));
  return HloSharding::PartialTile(TileAssignment(std::move(dims), std::move(devices)));
}

std::optional<std::vector<std::vector<int64_t>>> GroupsOverKey(const DeviceTiles& result,
                                                               const DeviceTiles& key) {
  const int64_t keys = key.NumTiles();
  // result tile -> key tile -> devices (ascending).
  std::map<int64_t, std::vector<std::vector<int64_t>>> by_tile;
  for (int64_t dev = 0; dev < result.num_devices(); ++dev) {
    auto& slots = by_tile[result.Flat(dev)];
    slots.resize(keys);
    slots[key.Flat(dev)].push_back(dev);
  }
  std::vector<std::vector<int64_t>> groups;
  for (auto& [tile, slots] : by_tile) {
    const size_t copies = slots[0].size();
    for (const std::vector<int64_t>& s : slots) {
      if (s.size() != copies || copies == 0) return std::nullopt;
    }
    for (size_t c = 0; c < copies; ++c) {
      std::vector<int64_t> group;
      for (const std::vector<int64_t>& s : slots) group.push_back(s[c]);
      groups.push_back(std::move(group));
    }
  }
  std::sort(groups.begin(), groups.end());
  return groups;
}

std::vector<DeviceTiles> Coarsenings(const DeviceTiles& base, const std::vector<int64_t>& dims) {
  std::vector<DeviceTiles> out = {base};
  for (int64_t d : dims) {
    const int64_t n = base.counts.at(d);
    std::vector<DeviceTiles> next;
    for (const DeviceTiles& t : out) {
      for (int64_t m = n; m >= 1; --m) {  // finest first
        if (n % m != 0) continue;
        next.push_back(t);
        next.back().Coarsen(d, m);
      }
    }
    out = std::move(next);
  }
  return out;
}

}  // namespace weft::spmd
