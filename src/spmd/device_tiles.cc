#include "device_tiles.h"

#include <algorithm>

#include "weft/base/error.h"

namespace weft::spmd {

namespace {
DeviceTiles Blank(int64_t rank, int64_t num_devices) {
  DeviceTiles t;
  t.counts.assign(rank, 1);
  t.num_devices_ = num_devices;
  t.index.assign(rank * num_devices, 0);
  return t;
}
}  // namespace

DeviceTiles DeviceTiles::Of(const HloSharding& sharding, int64_t rank, int64_t num_devices) {
  DeviceTiles t = Blank(rank, num_devices);
  if (!sharding.IsTiled()) return t;
  t.counts = sharding.TilesPerDim();
  WEFT_CHECK(static_cast<int64_t>(t.counts.size()) == rank, "internal: sharding {} for rank {}",
             sharding.ToString(), rank);
  // Position by position through the tile assignment: its leading `rank`
  // dims are the device's tile index.
  const TileAssignment& ta = sharding.tile_assignment();
  WEFT_CHECK(ta.num_elements() == num_devices, "internal: sharding {} on {} devices",
             sharding.ToString(), num_devices);
  const std::vector<int64_t>& devices = ta.devices();
  const int64_t full_rank = ta.num_dims();
  std::vector<int64_t> idx(full_rank, 0);
  for (int64_t flat = 0; flat < num_devices; ++flat) {
    WEFT_CHECK(devices[flat] < num_devices, "internal: sharding {} names device {} of {}",
               sharding.ToString(), devices[flat], num_devices);
    int32_t* row = &t.index[devices[flat] * rank];
    for (int64_t d = 0; d < rank; ++d) row[d] = static_cast<int32_t>(idx[d]);
    for (int64_t d = full_rank - 1; d >= 0; --d) {
      if (++idx[d] < ta.dim(d)) break;
      idx[d] = 0;
    }
  }
  return t;
}

DeviceTiles DeviceTiles::Map(const DeviceTiles& src, const std::vector<int64_t>& from) {
  const int64_t rank = static_cast<int64_t>(from.size());
  DeviceTiles t = Blank(rank, src.num_devices());
  const int64_t src_rank = src.rank();
  for (int64_t d = 0; d < rank; ++d) {
    if (from[d] < 0) continue;
    t.counts[d] = src.counts.at(from[d]);
    for (int64_t dev = 0; dev < src.num_devices(); ++dev) {
      t.index[dev * rank + d] = src.index[dev * src_rank + from[d]];
    }
  }
  return t;
}

DeviceTiles DeviceTiles::Join(const DeviceTiles& a, const std::vector<int64_t>& from_a,
                              const DeviceTiles& b, const std::vector<int64_t>& from_b) {
  WEFT_CHECK(from_a.size() == from_b.size(), "internal: joining dim maps of {} and {} dims",
             from_a.size(), from_b.size());
  DeviceTiles t = Map(a, from_a);
  const int64_t rank = t.rank(), b_rank = b.rank();
  for (int64_t d = 0; d < rank; ++d) {
    if (from_b[d] < 0) continue;
    t.counts[d] = b.counts.at(from_b[d]);
    for (int64_t dev = 0; dev < t.num_devices(); ++dev) {
      t.index[dev * rank + d] = b.index[dev * b_rank + from_b[d]];
    }
  }
  return t;
}

std::vector<std::vector<int64_t>> DeviceTiles::Rows() const {
  std::vector<std::vector<int64_t>> rows(num_devices_);
  for (int64_t dev = 0; dev < num_devices_; ++dev) {
    for (int64_t d = 0; d < rank(); ++d) rows[dev].push_back(at(dev, d));
  }
  return rows;
}

void DeviceTiles::SetRows(const std::vector<std::vector<int64_t>>& rows) {
  num_devices_ = static_cast<int64_t>(rows.size());
  index.clear();
  for (const std::vector<int64_t>& r : rows) {
    WEFT_CHECK(static_cast<int64_t>(r.size()) == rank(), "internal: row of {} for rank {}",
               r.size(), rank());
    for (int64_t v : r) index.push_back(static_cast<int32_t>(v));
  }
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
  const int32_t* row = index.data() + device * rank();  // no row at all for rank 0
  for (int64_t d = 0; d < rank(); ++d) flat = flat * counts[d] + row[d];
  return flat;
}

void DeviceTiles::Coarsen(int64_t d, int64_t m) {
  WEFT_CHECK(m >= 1 && counts.at(d) % m == 0, "internal: {} tiles do not coarsen to {}",
             counts.at(d), m);
  const int64_t step = counts[d] / m;
  counts[d] = m;
  const int64_t r = rank();
  for (int64_t dev = 0; dev < num_devices_; ++dev) index[dev * r + d] /= step;
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
  if (k > 1) dims.push_back(static_cast<int64_t>(k));
  // The iota form where the devices are one (they usually are): it prints
  // and compares in O(rank).
  TileAssignment assignment =
      TileAssignment(std::move(dims), std::move(devices)).AsIotaIfPossible();
  if (k == 1) return HloSharding::Tile(std::move(assignment));
  return HloSharding::PartialTile(std::move(assignment));
}

std::optional<std::vector<std::vector<int64_t>>> GroupsOverKey(const DeviceTiles& result,
                                                               const DeviceTiles& key) {
  const int64_t keys = key.NumTiles();
  const int64_t n = result.num_devices();
  // A run (one result tile's devices) holds every key tile: more keys than
  // devices cannot be.
  if (keys > n) return std::nullopt;
  // Devices ordered by (result tile, key tile, id): each result tile's run
  // holds every key tile `copies` times. Two stable counting passes (by key,
  // then by tile) over the ascending ids: O(devices), no comparison sort.
  struct Entry {
    int64_t tile, key, device;
  };
  std::vector<Entry> by_key(n);
  {
    std::vector<int64_t> next(keys + 1, 0);
    std::vector<int64_t> key_of(n);
    for (int64_t dev = 0; dev < n; ++dev) ++next[(key_of[dev] = key.Flat(dev)) + 1];
    for (int64_t k = 0; k < keys; ++k) next[k + 1] += next[k];
    for (int64_t dev = 0; dev < n; ++dev) {
      by_key[next[key_of[dev]]++] = {result.Flat(dev), key_of[dev], dev};
    }
  }
  std::vector<Entry> entries;
  const int64_t tiles = result.NumTiles();
  if (tiles <= n) {
    entries.resize(n);
    std::vector<int64_t> next(tiles + 1, 0);
    for (const Entry& e : by_key) ++next[e.tile + 1];
    for (int64_t t = 0; t < tiles; ++t) next[t + 1] += next[t];
    for (const Entry& e : by_key) entries[next[e.tile]++] = e;
  } else {  // sparse tiles (some held by no device): a stable sort instead
    entries = std::move(by_key);
    std::stable_sort(entries.begin(), entries.end(),
                     [](const Entry& a, const Entry& b) { return a.tile < b.tile; });
  }
  std::vector<std::vector<int64_t>> groups;
  for (int64_t begin = 0; begin < n;) {
    int64_t end = begin;
    while (end < n && entries[end].tile == entries[begin].tile) ++end;
    const int64_t run = end - begin;
    if (run % keys != 0) return std::nullopt;
    const int64_t copies = run / keys;
    for (int64_t i = 0; i < run; ++i) {
      if (entries[begin + i].key != i / copies) return std::nullopt;
    }
    for (int64_t c = 0; c < copies; ++c) {
      std::vector<int64_t> group(keys);
      for (int64_t k = 0; k < keys; ++k) group[k] = entries[begin + k * copies + c].device;
      groups.push_back(std::move(group));
    }
    begin = end;
  }
  std::sort(groups.begin(), groups.end());
  return groups;
}

std::vector<DeviceTiles> Coarsenings(const DeviceTiles& base, const std::vector<int64_t>& dims,
                                     const std::vector<int64_t>& hints) {
  std::vector<DeviceTiles> out = {base};
  for (int64_t d : dims) {
    const int64_t n = base.counts.at(d);
    std::vector<int64_t> factors;  // finest first
    for (int64_t m = n; m >= 1; --m) {
      if (n % m != 0) continue;
      bool wanted = hints.empty() || m == n || m == 1;
      for (int64_t h : hints) wanted = wanted || m == h || m * h == n;
      if (wanted) factors.push_back(m);
    }
    std::vector<DeviceTiles> next;
    for (const DeviceTiles& t : out) {
      for (int64_t m : factors) {
        next.push_back(t);
        next.back().Coarsen(d, m);
      }
    }
    out = std::move(next);
  }
  return out;
}

std::vector<int64_t> TileCounts(std::initializer_list<const DeviceTiles*> arrays) {
  std::vector<int64_t> counts;
  for (const DeviceTiles* a : arrays) {
    for (int64_t c : a->counts) {
      if (c > 1 && std::find(counts.begin(), counts.end(), c) == counts.end()) counts.push_back(c);
    }
  }
  return counts;
}

}  // namespace weft::spmd
