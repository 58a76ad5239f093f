// Runs a FusionPlan a tile at a time (fusion_tiles.h): the index helpers
// (rows, broadcasts, gathers, column bands, pad and concatenate indices), the
// elementwise steps on tiles, and TileRunner.
#include "fusion_tiles.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "elementwise_kernels.h"
#include "weft/base/copy_bytes.h"

namespace weft::runtime::exec::fusion {
namespace {

// Calls f(j, run) for each row of the innermost dimension that the n
// linear indices base, base + 1, ... cross (j: the first position, run: how
// many of the row's elements), with coord at the row's first element.
template <typename F>
void ForEachRow(const std::vector<int64_t>& dims, int64_t base, int64_t n,
                std::vector<int64_t>& coord, F&& f) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t last = rank - 1;
  int64_t k = base;
  for (int64_t d = last; d >= 0; --d) {
    coord[d] = k % dims[d];
    k /= dims[d];
  }
  int64_t j = 0;
  while (j < n) {
    const int64_t run = std::min(n - j, dims[last] - coord[last]);
    f(j, run);
    j += run;
    coord[last] += run;
    for (int64_t d = last; d > 0 && coord[d] == dims[d]; --d) {
      coord[d] = 0;
      ++coord[d - 1];
    }
  }
}

// A value repeated over a tile's run: target clones, so a CPU with AVX-512
// stores 64 bytes at a time where the baseline loop stores 16 (tiles stay in
// L1, so these fills are bound by their stores). Short runs stay inline.
#define WEFT_FILL_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
WEFT_FILL_CLONES void FillRun8(uint8_t* d, int64_t n, uint8_t v) { std::fill(d, d + n, v); }
WEFT_FILL_CLONES void FillRun16(uint16_t* d, int64_t n, uint16_t v) { std::fill(d, d + n, v); }
WEFT_FILL_CLONES void FillRun32(uint32_t* d, int64_t n, uint32_t v) { std::fill(d, d + n, v); }
WEFT_FILL_CLONES void FillRun64(uint64_t* d, int64_t n, uint64_t v) { std::fill(d, d + n, v); }
#undef WEFT_FILL_CLONES

template <typename T>
void FillRun(T* d, int64_t n, T v) {
  if (n < 64) {
    for (int64_t i = 0; i < n; ++i) d[i] = v;
  } else if constexpr (sizeof(T) == 1) {
    FillRun8(d, n, v);
  } else if constexpr (sizeof(T) == 2) {
    FillRun16(d, n, v);
  } else if constexpr (sizeof(T) == 4) {
    FillRun32(d, n, v);
  } else {
    FillRun64(d, n, v);
  }
}

// Elements [b, b + n) of broadcast `node`, copied from its source (`src`,
// storage elements) into `dst`.
template <int kBytes>
void GatherBroadcast(const Node& node, const void* src_v, void* dst_v, int64_t b, int64_t n,
                     std::vector<int64_t>& coord) {
  using T = typename Bits<kBytes>::type;
  const T* src = static_cast<const T*>(src_v);
  T* dst = static_cast<T*>(dst_v);
  switch (node.mode) {
    case BroadcastMode::kScalar:
      FillRun(dst, n, src[0]);
      return;
    case BroadcastMode::kSuffix: {  // a repeated row: index k % row
      int64_t k = b % node.row, j = 0;
      while (j < n) {
        const int64_t run = std::min(n - j, node.row - k);
        CopyBytes(dst + j, src + k, static_cast<size_t>(run) * kBytes);
        j += run;
        k = 0;
      }
      return;
    }
    case BroadcastMode::kPrefix: {  // an element per row: index k / row
      int64_t e = b / node.row, k = b % node.row, j = 0;
      while (j < n) {
        const int64_t run = std::min(n - j, node.row - k);
        FillRun(dst + j, run, src[e]);
        j += run;
        k = 0;
        ++e;
      }
      return;
    }
    case BroadcastMode::kGeneral:
      break;
  }
  // The broadcast's dims merged where the source runs on (PlanRuns).
  const std::vector<int64_t>& run_dims = node.run_dims;
  const int64_t rank = static_cast<int64_t>(run_dims.size());
  coord.assign(static_cast<size_t>(rank), 0);
  const std::vector<int64_t>& stride = node.run_strides;
  const int64_t inner_stride = stride[rank - 1];
  ForEachRow(run_dims, b, n, coord, [&](int64_t j, int64_t run) {
    int64_t base = 0;
    for (int64_t d = 0; d < rank; ++d) base += coord[d] * stride[d];
    if (inner_stride == 0) {
      FillRun(dst + j, run, src[base]);
    } else if (inner_stride == 1) {
      CopyBytes(dst + j, src + base, static_cast<size_t>(run) * kBytes);
    } else {
      for (int64_t i = 0; i < run; ++i) dst[j + i] = src[base + i * inner_stride];
    }
  });
}

void Gather(const Node& node, PrimitiveType storage, const void* src, void* dst, int64_t b,
            int64_t n, std::vector<int64_t>& coord) {
  switch (ByteWidth(storage)) {
    case 1:
      return GatherBroadcast<1>(node, src, dst, b, n, coord);
    case 2:
      return GatherBroadcast<2>(node, src, dst, b, n, coord);
    case 4:
      return GatherBroadcast<4>(node, src, dst, b, n, coord);
    default:
      return GatherBroadcast<8>(node, src, dst, b, n, coord);
  }
}

// Index maps: typed gathers and scatters of storage elements.
template <int kBytes>
void GatherIdx(const void* src_v, const int64_t* idx, int64_t n, void* dst_v) {
  using T = typename Bits<kBytes>::type;
  const T* src = static_cast<const T*>(src_v);
  T* dst = static_cast<T*>(dst_v);
  for (int64_t j = 0; j < n; ++j) dst[j] = src[idx[j]];
}
template <int kBytes>
void ScatterPos(const void* src_v, const int64_t* pos, int64_t n, void* dst_v) {
  using T = typename Bits<kBytes>::type;
  const T* src = static_cast<const T*>(src_v);
  T* dst = static_cast<T*>(dst_v);
  for (int64_t j = 0; j < n; ++j) dst[pos[j]] = src[j];
}
// Positions [b, b + n) of rows of `row_width` elements, columns [start,
// start + width) of each row from a source of rows of `width` elements
// (src[r * width + c - start]); the other columns are left as they are. A
// negative start or a band past the row crops it (a pad's negative padding).
template <int kBytes>
void CopyColumnBand(const void* src_v, int64_t start, int64_t width, int64_t row_width, int64_t b,
                    int64_t n, void* dst_v) {
  using T = typename Bits<kBytes>::type;
  const T* src = static_cast<const T*>(src_v);
  T* dst = static_cast<T*>(dst_v);
  int64_t r = b / row_width, c = b % row_width, j = 0;
  const int64_t lo = std::max<int64_t>(start, 0), hi = std::min(start + width, row_width);
  if (width == 1 && lo < hi) {                    // one column a row (RoPE's pairs): a strided copy
    int64_t first = c <= lo ? 0 : row_width - c;  // position of the first row's column
    first += lo - (c <= lo ? c : 0);
    for (int64_t p = first, rr = c <= lo ? r : r + 1; p < n; p += row_width, ++rr) {
      dst[p] = src[rr];
    }
    return;
  }
  while (j < n) {
    const int64_t end = std::min(row_width, c + (n - j));
    const int64_t k0 = std::max(c, lo), k1 = std::min(end, hi);
    for (int64_t k = k0; k < k1; ++k) dst[j + k - c] = src[r * width + k - start];
    j += end - c;
    c = 0;
    ++r;
  }
}

template <int kBytes>
void FillValue(const void* value, int64_t n, void* dst_v) {
  using T = typename Bits<kBytes>::type;
  T v;
  std::memcpy(&v, value, kBytes);
  FillRun(static_cast<T*>(dst_v), n, v);
}
template <typename F>
void ByWidth(int64_t width, F&& f) {
  switch (width) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    default:
      return f(std::integral_constant<int, 8>{});
  }
}

// Calls f(j, coord) for the n linear indices (contiguous from `base` when
// idx is null) in row-major `dims`; coord is updated in place.
template <typename F>
void ForEachCoord(const std::vector<int64_t>& dims, const int64_t* idx, int64_t base, int64_t n,
                  std::vector<int64_t>& coord, F&& f) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  auto decompose = [&](int64_t k) {
    for (int64_t d = rank - 1; d >= 0; --d) {
      coord[d] = k % dims[d];
      k /= dims[d];
    }
  };
  if (idx != nullptr) {
    for (int64_t j = 0; j < n; ++j) {
      decompose(idx[j]);
      f(j, coord);
    }
    return;
  }
  decompose(base);
  for (int64_t j = 0; j < n; ++j) {
    f(j, coord);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++coord[d] < dims[d]) break;
      coord[d] = 0;
    }
  }
}

// Operand index along dim d of pad `node` for coordinate c, or -1 where c
// is padding. The modulo only where there is interior padding.
int64_t PadCoord(const Node& node, int64_t d, int64_t c) {
  int64_t t = c - node.pad_low[d];
  if (t < 0) return -1;
  if (node.pad_step[d] != 1) {
    if (t % node.pad_step[d] != 0) return -1;
    t /= node.pad_step[d];
  }
  return t < node.operand_dims[d] ? t : -1;
}

// The elements of pad `node` among the n linear indices (idx, or base,
// base + 1, ...) that come from its operand: their positions j (pos) and
// operand linear indices (out_idx); returns how many. The contiguous case
// walks rows of the innermost dimension: the outer coordinates are checked
// once per row.
int64_t PadIndices(const Node& node, const int64_t* idx, int64_t base, int64_t n,
                   std::vector<int64_t>& coord, int64_t* pos, int64_t* out_idx) {
  const int64_t rank = static_cast<int64_t>(node.dims.size());
  int64_t m = 0;
  if (idx != nullptr || rank == 0) {
    ForEachCoord(node.dims, idx, base, n, coord, [&](int64_t j, const std::vector<int64_t>& c) {
      int64_t o = 0;
      for (int64_t d = 0; d < rank; ++d) {
        const int64_t t = PadCoord(node, d, c[d]);
        if (t < 0) return;
        o = o * node.operand_dims[d] + t;
      }
      pos[m] = j;
      out_idx[m++] = o;
    });
    return m;
  }
  const int64_t last = rank - 1, inner = node.operand_dims[last];
  ForEachRow(node.dims, base, n, coord, [&](int64_t j, int64_t run) {
    int64_t o = 0;
    for (int64_t d = 0; d < last; ++d) {
      const int64_t t = PadCoord(node, d, coord[d]);
      if (t < 0) return;
      o = o * node.operand_dims[d] + t;
    }
    o *= inner;
    const int64_t c0 = coord[last];
    if (node.pad_step[last] == 1) {  // the operand's part of the row is one run
      const int64_t lo = std::max<int64_t>(0, node.pad_low[last] - c0);
      const int64_t hi = std::min<int64_t>(run, node.pad_low[last] + inner - c0);
      for (int64_t r = lo; r < hi; ++r) {
        pos[m] = j + r;
        out_idx[m++] = o + c0 + r - node.pad_low[last];
      }
      return;
    }
    for (int64_t r = 0; r < run; ++r) {
      const int64_t t = PadCoord(node, last, c0 + r);
      if (t < 0) continue;
      pos[m] = j + r;
      out_idx[m++] = o + t;
    }
  });
  return m;
}

// The elements of concatenate `node` among the n linear indices that come
// from operand `part`: positions and the operand's linear indices, as
// PadIndices; the contiguous case a row of the innermost dimension at a
// time.
int64_t ConcatIndices(const Node& node, size_t part, const int64_t* idx, int64_t base, int64_t n,
                      std::vector<int64_t>& coord, int64_t* pos, int64_t* out_idx) {
  const int64_t rank = static_cast<int64_t>(node.dims.size());
  const int64_t cd = node.concat_dim;
  const int64_t lo = node.concat_starts[part], hi = node.concat_starts[part + 1];
  int64_t m = 0;
  if (idx != nullptr) {
    ForEachCoord(node.dims, idx, base, n, coord, [&](int64_t j, const std::vector<int64_t>& c) {
      if (c[cd] < lo || c[cd] >= hi) return;
      int64_t o = 0;
      for (int64_t d = 0; d < rank; ++d) {
        o = d == cd ? o * (hi - lo) + (c[d] - lo) : o * node.dims[d] + c[d];
      }
      pos[m] = j;
      out_idx[m++] = o;
    });
    return m;
  }
  const int64_t last = rank - 1;
  ForEachRow(node.dims, base, n, coord, [&](int64_t j, int64_t run) {
    int64_t o = 0;
    for (int64_t d = 0; d < last; ++d) {
      if (d == cd) {
        if (coord[d] < lo || coord[d] >= hi) return;
        o = o * (hi - lo) + (coord[d] - lo);
      } else {
        o = o * node.dims[d] + coord[d];
      }
    }
    const int64_t c0 = coord[last];
    if (cd == last) {  // the part's columns of the row
      const int64_t r0 = std::max<int64_t>(0, lo - c0), r1 = std::min<int64_t>(run, hi - c0);
      o = o * (hi - lo);
      for (int64_t r = r0; r < r1; ++r) {
        pos[m] = j + r;
        out_idx[m++] = o + c0 + r - lo;
      }
      return;
    }
    o = o * node.dims[last] + c0;
    for (int64_t r = 0; r < run; ++r) {
      pos[m] = j + r;
      out_idx[m++] = o + r;
    }
  });
  return m;
}

// A rank-0 source splatted over the tile, in its tile representation.
void FillScalar(const Node& node, const std::byte* src, void* dst, int64_t n) {
  if (IsHalf(node.type)) {
    float v;
    cached::HalfToFloat(node.type, reinterpret_cast<const uint16_t*>(src), &v, 1);
    return FillValue<4>(&v, n, dst);
  }
  ByWidth(ByteWidth(node.type), [&](auto k) { FillValue<decltype(k)::value>(src, n, dst); });
}

// The elementwise steps on a tile of n values (`in`: the operands' tiles).
// Whether a unary or binary node's kernel rounds its bf16 result itself, in
// the pass that computes it (StoreNode then does not): to a bf16 value kept
// in f32 inside the tile, to bf16 bits straight into the output at the root.
bool RoundsInKernel(const Node& node) {
  return node.type == PrimitiveType::kBF16 &&
         (node.kind == NodeKind::kUnary || node.kind == NodeKind::kBinary);
}

void UnaryTile(const Node& node, bool root, const Node& operand, const void* a, void* dst,
               int64_t n) {
  if (RoundsInKernel(node)) {
    cached::UnaryFloatToBf16(node.op, a, operand.raw_bf16, dst, root, n);
  } else if (node.repr == PrimitiveType::kF32) {
    cached::UnaryFloat(node.op, static_cast<const float*>(a), static_cast<float*>(dst), n);
  } else if (node.repr == PrimitiveType::kPred) {
    NotPred(static_cast<const uint8_t*>(a), static_cast<uint8_t*>(dst), n);
  } else {
    DispatchInt(node.repr, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      UnaryInt(node.op, static_cast<const T*>(a), static_cast<T*>(dst), n);
    });
  }
}

void BinaryTile(const Node& node, bool root, const Node& lhs, const Node& rhs, const void* a,
                const void* b, void* dst, int64_t n) {
  if (RoundsInKernel(node)) {
    cached::BinaryFloatToBf16(node.op, a, lhs.raw_bf16, b, rhs.raw_bf16, dst, root, n);
  } else if (node.repr == PrimitiveType::kF32) {
    cached::BinaryFloat(node.op, static_cast<const float*>(a), static_cast<const float*>(b),
                        static_cast<float*>(dst), n);
  } else if (node.repr == PrimitiveType::kPred) {
    BinaryPred(node.op, static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b),
               static_cast<uint8_t*>(dst), n);
  } else {
    DispatchInt(node.repr, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      BinaryInt(node.op, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(dst),
                n);
    });
  }
}

// `t`: the operands' tile representation.
void CompareTile(const Node& node, PrimitiveType t, const void* a, const void* b, void* dst,
                 int64_t n) {
  uint8_t* o = static_cast<uint8_t*>(dst);
  if (t == PrimitiveType::kF32 && node.total_order) {
    CompareTotalOrder(node.direction, static_cast<const float*>(a), static_cast<const float*>(b), o,
                      n);
  } else if (t == PrimitiveType::kF32) {
    cached::Compare(node.direction, static_cast<const float*>(a), static_cast<const float*>(b), o,
                    n);
  } else if (t == PrimitiveType::kPred) {
    CompareValues(node.direction, static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), o,
                  n);
  } else {
    DispatchInt(t, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      CompareValues(node.direction, static_cast<const T*>(a), static_cast<const T*>(b), o, n);
    });
  }
}

void SelectTile(const Node& node, const void* pred, const void* a, const void* b, void* dst,
                int64_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(pred);
  switch (ByteWidth(node.repr)) {
    case 1:
      SelectBytes<1>(p, false, a, b, dst, 0, n);
      break;
    case 2:
      SelectBytes<2>(p, false, a, b, dst, 0, n);
      break;
    case 4:
      SelectBytes<4>(p, false, a, b, dst, 0, n);
      break;
    default:
      SelectBytes<8>(p, false, a, b, dst, 0, n);
  }
}

void ClampTile(const Node& node, const void* lo, const void* x, const void* hi, void* dst,
               int64_t n) {
  if (node.repr == PrimitiveType::kF32) {
    cached::ClampFloat(static_cast<const float*>(lo), false, static_cast<const float*>(x),
                       static_cast<const float*>(hi), false, static_cast<float*>(dst), n);
  } else {
    DispatchInt(node.repr, [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      ClampInt(static_cast<const T*>(lo), false, static_cast<const T*>(x),
               static_cast<const T*>(hi), false, static_cast<T*>(dst), n);
    });
  }
}

// `from`: the operand's tile representation.
void ConvertTile(const Node& node, PrimitiveType from, const void* a, void* dst, int64_t n) {
  if (from == node.repr) {
    if (dst != a) std::memcpy(dst, a, static_cast<size_t>(n) * ByteWidth(from));
  } else {
    ConvertElements(from, a, node.repr, dst, n);
  }
}

// Runs of consecutive values along the last dimension (inner == 1), written
// straight in the tile's integer type: a loop that vectorizes.
template <typename T>
void IotaRuns(int64_t extent, int64_t b, int64_t n, T* dst) {
  int64_t v = b % extent, j = 0;
  while (j < n) {
    const int64_t run = std::min(n - j, extent - v);
    for (int64_t k = 0; k < run; ++k) dst[j + k] = static_cast<T>(v + k);
    j += run;
    v = 0;
  }
}

void IotaTile(const Node& node, int64_t* ints, int64_t b, int64_t n, void* dst) {
  if (node.iota_inner == 1 && node.repr == PrimitiveType::kS32) {
    return IotaRuns(node.iota_extent, b, n, static_cast<int32_t*>(dst));
  }
  if (node.iota_inner == 1 && node.repr == PrimitiveType::kF32) {
    return IotaRuns(node.iota_extent, b, n, static_cast<float*>(dst));
  }
  int64_t v = (b / node.iota_inner) % node.iota_extent, r = b % node.iota_inner;
  for (int64_t j = 0; j < n; ++j) {
    ints[j] = v;
    if (++r == node.iota_inner) {
      r = 0;
      if (++v == node.iota_extent) v = 0;
    }
  }
  ConvertElements(PrimitiveType::kS64, ints, node.repr, dst, n);
}

// After node `node` (the root when `root`) made its tile at `dst`: a
// half-typed value is rounded as a store would round it; the root is
// rounded by its conversion into the output, or copied there.
void StoreNode(const Node& node, bool root, void* dst, std::byte* out, PrimitiveType out_type,
               int64_t n) {
  const bool computed =
      node.kind != NodeKind::kSource && node.kind != NodeKind::kReshape &&
      !((node.kind == NodeKind::kBroadcast || node.kind == NodeKind::kIndexMap) && root);
  if (root && node.kind == NodeKind::kReshape && IsHalf(node.type)) {
    cached::FloatToHalf(node.type, static_cast<const float*>(dst), reinterpret_cast<uint16_t*>(out),
                        n);
  } else if (IsHalf(node.type) && computed && !RoundsInKernel(node)) {
    if (root) {
      cached::FloatToHalf(node.type, static_cast<const float*>(dst),
                          reinterpret_cast<uint16_t*>(out), n);
    } else {
      cached::RoundToHalf(node.type, static_cast<float*>(dst), n);
    }
  } else if (root && dst != out) {
    std::memcpy(out, dst, static_cast<size_t>(n) * ByteWidth(out_type));
  }
}

}  // namespace

Scratch& ThreadScratch(const FusionPlan& plan) {
  thread_local Scratch scratch;
  scratch.Reserve(plan.num_slots, plan.max_depth, plan.nodes.size());
  return scratch;
}

void TileRunner::Run(Scratch& scratch, int64_t b, int64_t n) {
  const std::vector<Node>& nodes = plan_.nodes;
  const int32_t root = static_cast<int32_t>(nodes.size()) - 1;
  const PrimitiveType out_type = plan_.shape.element_type();
  std::byte* out = static_cast<std::byte*>(out_) + (b - origin_) * ByteWidth(out_type);
  for (int32_t i = 0; i <= root; ++i) {
    const Node& node = nodes[i];
    if (!node.has_tile) continue;
    void* dst = node.slot >= 0 ? scratch.slot(node.slot) : (i == root ? out : nullptr);
    if (i == root && RoundsInKernel(node)) dst = out;  // narrowed as computed
    dst = ComputeNode(scratch, i, b, n, dst);
    StoreNode(node, i == root, dst, out, out_type, n);
    scratch.ptrs[i] = dst;
  }
}

void* TileRunner::ComputeNode(Scratch& scratch, int32_t i, int64_t b, int64_t n, void* dst) const {
  const std::vector<Node>& nodes = plan_.nodes;
  const Node& node = nodes[i];
  const bool root = i == static_cast<int32_t>(nodes.size()) - 1;
  auto in = [&](int k) { return scratch.ptrs[node.operands[k]]; };
  switch (node.kind) {
    case NodeKind::kSource: {
      const std::byte* src = static_cast<const std::byte*>(Source(node));
      if (node.splat) {
        FillScalar(node, src, dst, n);
      } else if (IsHalf(node.type) && !root && !node.raw_bf16) {
        cached::HalfToFloat(node.type, reinterpret_cast<const uint16_t*>(src) + b,
                            static_cast<float*>(dst), n);
      } else {
        dst = const_cast<std::byte*>(src) + b * ByteWidth(node.type);  // in place
      }
      break;
    }
    case NodeKind::kBroadcast: {
      const void* src = Source(nodes[node.operands[0]]);
      if (IsHalf(node.type) && !root) {
        Gather(node, node.type, src, scratch.half.data(), b, n, scratch.broadcast_coord);
        cached::HalfToFloat(node.type, scratch.half.data(), static_cast<float*>(dst), n);
      } else {  // storage elements (f32, integers, pred; or the half root)
        Gather(node, node.type, src, dst, b, n, scratch.broadcast_coord);
      }
      break;
    }
    case NodeKind::kIndexMap:
      if (IsHalf(node.type) && !root) {
        GatherTree(scratch, i, nullptr, b, n, scratch.half.data(), 0);
        cached::HalfToFloat(node.type, scratch.half.data(), static_cast<float*>(dst), n);
      } else {
        GatherTree(scratch, i, nullptr, b, n, dst, 0);
      }
      break;
    case NodeKind::kReshape:
      dst = const_cast<void*>(in(0));
      break;
    case NodeKind::kIota:
      IotaTile(node, scratch.ints.data(), b, n, dst);
      break;
    case NodeKind::kUnary:
      UnaryTile(node, root, nodes[node.operands[0]], in(0), dst, n);
      break;
    case NodeKind::kBinary:
      BinaryTile(node, root, nodes[node.operands[0]], nodes[node.operands[1]], in(0), in(1), dst,
                 n);
      break;
    case NodeKind::kCompare:
      CompareTile(node, nodes[node.operands[0]].repr, in(0), in(1), dst, n);
      break;
    case NodeKind::kSelect:
      SelectTile(node, in(0), in(1), in(2), dst, n);
      break;
    case NodeKind::kClamp:
      ClampTile(node, in(0), in(1), in(2), dst, n);
      break;
    case NodeKind::kConvert:
      ConvertTile(node, nodes[node.operands[0]].repr, in(0), dst, n);
      break;
  }
  return dst;
}

// The storage elements of node `id` (gathered: a source, reshape, broadcast
// or index map) at its linear indices idx[0..n) — or base, base + 1, ...
// when idx is null — into dst. Composes the index maps down to the sources.
void TileRunner::GatherTree(Scratch& scratch, int32_t id, const int64_t* idx, int64_t base,
                            int64_t n, void* dst, int32_t level) const {
  const Node& node = plan_.nodes[id];
  const int64_t w = ByteWidth(node.type);
  if (node.kind == NodeKind::kSource) {
    const std::byte* src = static_cast<const std::byte*>(Source(node));
    if (idx == nullptr) {
      std::memcpy(dst, src + base * w, static_cast<size_t>(n * w));
    } else {
      ByWidth(w, [&](auto k) { GatherIdx<decltype(k)::value>(src, idx, n, dst); });
    }
    return;
  }
  if (node.kind == NodeKind::kReshape) {
    return GatherTree(scratch, node.operands[0], idx, base, n, dst, level);
  }
  int64_t* out_idx = scratch.level(level, 0);
  if (node.affine) {
    const std::vector<int64_t>& dims = node.run_dims;
    const std::vector<int64_t>& strides = node.run_strides;
    const int64_t rank = static_cast<int64_t>(dims.size());
    std::vector<int64_t>& coord = scratch.coord(level, static_cast<size_t>(rank));
    if (node.period > 0) {  // one table lookup an element
      const int64_t period = node.period;
      const int64_t* map = node.period_map.data();
      if (idx == nullptr) {
        int64_t r = base % period, start = base - r;
        for (int64_t j = 0; j < n; ++j) {
          out_idx[j] = start + map[r];
          if (++r == period) {
            r = 0;
            start += period;
          }
        }
      } else {
        for (int64_t j = 0; j < n; ++j) {
          const int64_t r = idx[j] % period;
          out_idx[j] = idx[j] - r + map[r];
        }
      }
    } else if (idx == nullptr) {  // runs along the last dimension
      const int64_t last = rank - 1, step = strides[last];
      const Node& operand = plan_.nodes[node.operands[0]];
      // Rows contiguous in a source (a slice or a transpose that keeps the
      // last dimension): copied a row at a time, no indices.
      const bool copy_rows = step == 1 && operand.kind == NodeKind::kSource;
      const std::byte* src = copy_rows ? static_cast<const std::byte*>(Source(operand)) : nullptr;
      ForEachRow(dims, base, n, coord, [&](int64_t j, int64_t run) {
        int64_t o = node.offset;
        for (int64_t d = 0; d < rank; ++d) o += coord[d] * strides[d];
        if (copy_rows) {
          CopyBytes(static_cast<std::byte*>(dst) + j * w, src + o * w,
                    static_cast<size_t>(run * w));
        } else {
          for (int64_t r = 0; r < run; ++r) out_idx[j + r] = o + r * step;
        }
      });
      if (copy_rows) return;
    } else {
      // Gathered indices mostly stay in one row of the last dimension (a
      // reverse of RoPE's pairs under a transpose reads 1, 0, 3, 2, ...):
      // the row's offset is kept, and the divisions run only when an index
      // leaves it.
      const int64_t last = rank - 1, row_len = dims[last], step = strides[last];
      int64_t row_start = 0, row_offset = 0;
      bool have_row = false;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t k = idx[j];
        if (!have_row || k < row_start || k - row_start >= row_len) {
          int64_t q = k / row_len, o = node.offset;
          row_start = q * row_len;
          for (int64_t d = last - 1; d >= 0; --d) {
            o += (q % dims[d]) * strides[d];
            q /= dims[d];
          }
          row_offset = o;
          have_row = true;
        }
        out_idx[j] = row_offset + (k - row_start) * step;
      }
    }
    return GatherTree(scratch, node.operands[0], out_idx, 0, n, dst, level + 1);
  }
  if (!node.column_source.empty() && idx == nullptr) {
    if (node.op == HloOpcode::kPad) {
      const void* value = Source(plan_.nodes[node.operands[1]]);
      ByWidth(w, [&](auto k) { FillValue<decltype(k)::value>(value, n, dst); });
    }
    for (size_t k = 0; k < node.column_source.size(); ++k) {
      const void* src = Source(plan_.nodes[node.column_source[k]]);
      ByWidth(w, [&](auto width) {
        CopyColumnBand<decltype(width)::value>(src, node.column_start[k], node.column_width[k],
                                               node.row_width, base, n, dst);
      });
    }
    return;
  }
  std::vector<int64_t>& coord = scratch.coord(level, node.dims.size());
  int64_t* pos = scratch.level(level, 1);
  void* tmp = scratch.level(level, 2);
  auto gather_part = [&](int32_t operand, int64_t m) {
    GatherTree(scratch, operand, out_idx, 0, m, tmp, level + 1);
    ByWidth(w, [&](auto k) { ScatterPos<decltype(k)::value>(tmp, pos, m, dst); });
  };
  if (node.op == HloOpcode::kPad) {
    const void* value = Source(plan_.nodes[node.operands[1]]);
    ByWidth(w, [&](auto k) { FillValue<decltype(k)::value>(value, n, dst); });
    const int64_t m = PadIndices(node, idx, base, n, coord, pos, out_idx);
    return gather_part(node.operands[0], m);
  }
  // concatenate: each operand's elements in turn.
  for (size_t part = 0; part < node.operands.size(); ++part) {
    const int64_t m = ConcatIndices(node, part, idx, base, n, coord, pos, out_idx);
    if (m > 0) gather_part(node.operands[part], m);
  }
}

}  // namespace weft::runtime::exec::fusion
