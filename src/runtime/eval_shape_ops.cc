// Ops that move elements without computing on them: broadcast, reshape,
// transpose, slice, dynamic-slice, dynamic-update-slice, concatenate, pad,
// iota, reverse. All but iota reduce to one strided copy (StridedCopy),
// which merges dimensions, copies contiguous runs with memcpy and tiles
// transposes so both sides stay in cache.
#include <algorithm>
#include <cstring>
#include <span>

#include "executor_eval.h"
#include "weft/base/copy_bytes.h"
#include "weft/base/error.h"
#include "weft/base/thread_pool.h"
#include "weft/compiler/all_to_all_layout.h"
#include "weft/compiler/buffer_assignment.h"

namespace weft::runtime::exec {
namespace {

using Dim = CopyDim;

template <typename T>
void CopyRun(const T* src, int64_t src_stride, T* dst, int64_t dst_stride, int64_t n) {
  if (src_stride == 1 && dst_stride == 1) {
    CopyBytes(dst, src, static_cast<size_t>(n) * sizeof(T));
  } else if (src_stride == 0) {
    const T v = *src;
    for (int64_t i = 0; i < n; ++i) dst[i * dst_stride] = v;
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * dst_stride] = src[i * src_stride];
  }
}

// Copies `dims` (canonical), with dims[0]'s size replaced by `first`: a
// part of a copy split along its outermost dim.
template <typename T>
void StridedCopyT(const T* src, T* dst, std::span<const Dim> dims, int64_t first) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (rank == 0) {
    *dst = *src;
    return;
  }
  auto size = [&](int64_t k) { return k == 0 ? first : dims[k].size; };
  const Dim inner = {size(rank - 1), dims[rank - 1].src, dims[rank - 1].dst};
  // A transpose: the innermost destination run reads the source with a
  // stride. Tile it against the dim that is contiguous in the source.
  int64_t tile_dim = -1;
  if (inner.src != 1 && inner.src != 0 && inner.size >= 8) {
    for (int64_t j = 0; j + 1 < rank; ++j) {
      if (dims[j].src == 1 && size(j) >= 8) tile_dim = j;
    }
  }
  OdometerDigits digits(rank, 0);
  int64_t* index = digits.data();
  const int64_t outer_rank = rank - 1;
  auto advance = [&](int64_t& s, int64_t& d) -> bool {  // odometer over outer dims
    for (int64_t k = outer_rank - 1; k >= 0; --k) {
      if (k == tile_dim) continue;
      const int64_t n = size(k);
      if (++index[k] < n) {
        s += dims[k].src, d += dims[k].dst;
        return true;
      }
      s -= dims[k].src * (n - 1), d -= dims[k].dst * (n - 1);
      index[k] = 0;
    }
    return false;
  };
  int64_t s = 0, d = 0;
  if (tile_dim < 0) {
    do {
      CopyRun(src + s, inner.src, dst + d, inner.dst, inner.size);
    } while (advance(s, d));
    return;
  }
  constexpr int64_t kTile = 32;
  const Dim tj = {size(tile_dim), dims[tile_dim].src, dims[tile_dim].dst};
  do {
    for (int64_t j0 = 0; j0 < tj.size; j0 += kTile) {
      const int64_t j1 = std::min(tj.size, j0 + kTile);
      for (int64_t i0 = 0; i0 < inner.size; i0 += kTile) {
        const int64_t i1 = std::min(inner.size, i0 + kTile);
        for (int64_t j = j0; j < j1; ++j) {
          const T* sp = src + s + j * tj.src;
          T* dp = dst + d + j * tj.dst;
          for (int64_t i = i0; i < i1; ++i) dp[i * inner.dst] = sp[i * inner.src];
        }
      }
    }
  } while (advance(s, d));
}

const std::byte* Bytes(const HostTensor& t) { return static_cast<const std::byte*>(t.raw_data()); }
std::byte* MutableBytes(const HostTensor& t) {
  return static_cast<std::byte*>(t.mutable_raw_data());
}

// The dims of an array copied into a row-major destination.
CopyDims RowMajorDims(std::span<const int64_t> sizes, std::span<const int64_t> src_strides) {
  const DimensionVector dst = RowMajorStrides(sizes);
  CopyDims dims;
  for (size_t i = 0; i < sizes.size(); ++i) dims.push_back({sizes[i], src_strides[i], dst[i]});
  return dims;
}

// Slices `x` at starts/strides into the result; shares the bytes when the
// slice is contiguous and sharing cannot keep much memory alive.
Value SliceOf(const HloInstruction& instr, EvalArgs& args, std::span<const int64_t> starts,
              std::span<const int64_t> strides) {
  const HostTensor& x = args.array(0);
  const DimensionVector& sizes = instr.shape().dimensions();
  const DimensionVector in_strides = RowMajorStrides(x.dimensions());
  const int64_t elem = ByteWidth(x.element_type());
  int64_t offset = 0;
  for (size_t i = 0; i < starts.size(); ++i) offset += starts[i] * in_strides[i];
  const bool unit_strides =
      std::all_of(strides.begin(), strides.end(), [](int64_t s) { return s == 1; });
  const bool operand_lives_on = !args.OperandDies(0);
  if (unit_strides && compiler::IsContiguousBox(x.dimensions(), sizes) &&
      (operand_lives_on || 2 * instr.shape().ByteSize() >= x.byte_size())) {
    return Value{x.View(instr.shape(), offset * elem)};
  }
  HostTensor out = args.ctx().Allocate(instr.shape());
  DimensionVector src_strides(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) src_strides[i] = in_strides[i] * strides[i];
  StridedCopy(Bytes(x) + offset * elem, out.mutable_raw_data(), RowMajorDims(sizes, src_strides),
              elem);
  return Value{std::move(out)};
}

// Dynamic start indices (operands first..), clamped so the box fits.
DimensionVector DynamicStarts(EvalArgs& args, int64_t first, std::span<const int64_t> dims,
                              std::span<const int64_t> sizes) {
  DimensionVector starts(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    const HostTensor& s = args.array(first + static_cast<int64_t>(i));
    const int64_t v = LoadAsInt(s.element_type(), s.raw_data(), 0);
    starts[i] = std::clamp<int64_t>(v, 0, dims[i] - sizes[i]);
  }
  return starts;
}

Value EvalBroadcast(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& x = args.array(0);
  const Shape& shape = instr.shape();
  // Same element count and dims in order: only unit dims are added.
  const std::vector<int64_t>& dims = instr.dimensions();
  if (x.element_count() == shape.ElementsCount() && std::is_sorted(dims.begin(), dims.end())) {
    return Value{x.Reshaped(shape)};
  }
  HostTensor out = args.ctx().Allocate(shape);
  DimensionVector src(shape.rank(), 0);
  const DimensionVector x_strides = RowMajorStrides(x.dimensions());
  for (size_t i = 0; i < instr.dimensions().size(); ++i) {
    src[instr.dimensions()[i]] = x_strides[i];
  }
  StridedCopy(x.raw_data(), out.mutable_raw_data(), RowMajorDims(shape.dimensions(), src),
              ByteWidth(x.element_type()));
  return Value{std::move(out)};
}

Value EvalTranspose(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& x = args.array(0);
  // The all-to-all before it already wrote these bytes in this layout.
  if (compiler::ForwardsAllToAll(instr)) return Value{x.Reshaped(instr.shape())};
  HostTensor out = args.ctx().Allocate(instr.shape());
  TransposeBytes(x.raw_data(), x.dimensions(), instr.dimensions(), ByteWidth(x.element_type()),
                 out.mutable_raw_data());
  return Value{std::move(out)};
}

Value EvalDynamicUpdateSlice(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& x = args.array(0);
  const HostTensor& update = args.array(1);
  HostTensor out = args.TryReuse(0, instr.shape());
  if (!out.valid()) {  // the operand lives on: update a copy
    out = args.ctx().Allocate(instr.shape());
    std::memcpy(out.mutable_raw_data(), x.raw_data(), static_cast<size_t>(x.byte_size()));
  }
  const DimensionVector starts = DynamicStarts(args, 2, x.dimensions(), update.dimensions());
  const DimensionVector strides = RowMajorStrides(x.dimensions());
  const int64_t elem = ByteWidth(x.element_type());
  int64_t offset = 0;
  CopyDims dims;
  const DimensionVector src = RowMajorStrides(update.dimensions());
  for (int64_t i = 0; i < x.rank(); ++i) {
    offset += starts[i] * strides[i];
    dims.push_back({update.dimensions()[i], src[i], strides[i]});
  }
  StridedCopy(update.raw_data(), MutableBytes(out) + offset * elem, dims, elem);
  return Value{std::move(out)};
}

Value EvalConcatenate(const HloInstruction& instr, EvalArgs& args) {
  const Shape& shape = instr.shape();
  HostTensor out = args.ctx().Allocate(shape);
  const int64_t d = instr.dimensions()[0];
  const int64_t elem = ByteWidth(shape.element_type());
  int64_t outer = 1, inner = elem;
  for (int64_t i = 0; i < d; ++i) outer *= shape.dimensions(i);
  for (int64_t i = d + 1; i < shape.rank(); ++i) inner *= shape.dimensions(i);
  const int64_t out_row = shape.dimensions(d) * inner;
  int64_t at = 0;
  for (int64_t k = 0; k < args.size(); ++k) {
    const HostTensor& x = args.array(k);
    const int64_t row = x.dimensions()[d] * inner;
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(MutableBytes(out) + o * out_row + at, Bytes(x) + o * row,
                  static_cast<size_t>(row));
    }
    at += row;
  }
  return Value{std::move(out)};
}

void FillWith(const HostTensor& out, const HostTensor& value) {
  const int64_t elem = ByteWidth(out.element_type());
  CopyDims dims = {{out.element_count(), 0, 1}};
  StridedCopy(value.raw_data(), out.mutable_raw_data(), dims, elem);
}

Value EvalPad(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& x = args.array(0);
  HostTensor out = args.ctx().Allocate(instr.shape());
  FillWith(out, args.array(1));
  const std::vector<PadDim>& pad = instr.attrs().padding;
  const DimensionVector src = RowMajorStrides(x.dimensions());
  const DimensionVector dst = RowMajorStrides(instr.shape().dimensions());
  const int64_t elem = ByteWidth(x.element_type());
  // Source element i lands at low + i * (interior + 1); negative padding
  // crops the elements that land outside.
  int64_t src_offset = 0, dst_offset = 0;
  CopyDims dims;
  for (int64_t i = 0; i < x.rank(); ++i) {
    const int64_t step = pad[i].interior + 1;
    const int64_t out_size = instr.shape().dimensions(i);
    int64_t first = 0;
    if (pad[i].low < 0) first = (-pad[i].low + step - 1) / step;
    int64_t last = x.dimensions()[i] - 1;
    while (last >= first && pad[i].low + last * step >= out_size) --last;
    const int64_t count = std::max<int64_t>(0, last - first + 1);
    src_offset += first * src[i];
    dst_offset += (pad[i].low + first * step) * dst[i];
    dims.push_back({count, src[i], dst[i] * step});
  }
  StridedCopy(Bytes(x) + src_offset * elem, MutableBytes(out) + dst_offset * elem, dims, elem);
  return Value{std::move(out)};
}

Value EvalIota(const HloInstruction& instr, EvalArgs& args) {
  const Shape& shape = instr.shape();
  HostTensor out = args.ctx().Allocate(shape);
  const int64_t d = instr.attrs().iota_dimension;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= shape.dimensions(i);
  for (int64_t i = d + 1; i < shape.rank(); ++i) inner *= shape.dimensions(i);
  const int64_t n = shape.dimensions(d);
  const PrimitiveType t = shape.element_type();
  // One row of n * inner values, then copies of it.
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t k = 0; k < inner; ++k) {
      StoreDouble(t, out.mutable_raw_data(), v * inner + k, static_cast<double>(v));
    }
  }
  const int64_t row = n * inner * ByteWidth(t);
  for (int64_t o = 1; o < outer; ++o) {
    std::memcpy(MutableBytes(out) + o * row, Bytes(out), static_cast<size_t>(row));
  }
  return Value{std::move(out)};
}

Value EvalReverse(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& x = args.array(0);
  HostTensor out = args.ctx().Allocate(instr.shape());
  DimensionVector src = RowMajorStrides(x.dimensions());
  int64_t offset = 0;
  for (int64_t d : instr.dimensions()) {
    offset += (x.dimensions()[d] - 1) * src[d];
    src[d] = -src[d];
  }
  const int64_t elem = ByteWidth(x.element_type());
  StridedCopy(Bytes(x) + offset * elem, out.mutable_raw_data(), RowMajorDims(x.dimensions(), src),
              elem);
  return Value{std::move(out)};
}

}  // namespace

DimensionVector RowMajorStrides(std::span<const int64_t> dims) {
  DimensionVector strides(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * dims[i + 1];
  }
  return strides;
}

void StridedCopy(const void* src, void* dst, CopyDims dims, int64_t elem_bytes) {
  for (const Dim& d : dims) {
    if (d.size == 0) return;
  }
  CanonicalizeCopyDims(dims);
  const std::span<const Dim> all(dims);
  auto copy = [&](const std::byte* s, std::byte* d, int64_t first) {
    switch (elem_bytes) {
      case 1:
        return StridedCopyT(reinterpret_cast<const uint8_t*>(s), reinterpret_cast<uint8_t*>(d), all,
                            first);
      case 2:
        return StridedCopyT(reinterpret_cast<const uint16_t*>(s), reinterpret_cast<uint16_t*>(d),
                            all, first);
      case 4:
        return StridedCopyT(reinterpret_cast<const uint32_t*>(s), reinterpret_cast<uint32_t*>(d),
                            all, first);
      case 8:
        return StridedCopyT(reinterpret_cast<const uint64_t*>(s), reinterpret_cast<uint64_t*>(d),
                            all, first);
      default:
        Fail("no strided copy for {}-byte elements", elem_bytes);
    }
  };
  const auto* from = static_cast<const std::byte*>(src);
  auto* to = static_cast<std::byte*>(dst);
  // A large copy runs on the thread pool (the calling thread's share), in
  // parts along its outermost dim: each part writes its own elements.
  constexpr int64_t kPartBytes = 128 << 10;
  int64_t bytes = elem_bytes;
  for (const Dim& d : dims) bytes *= d.size;
  const int64_t outer = dims.empty() ? 1 : dims[0].size;
  const int64_t parts = std::min(outer, bytes / kPartBytes);
  if (parts < 2) return copy(from, to, outer);
  ThreadPool::Global().ParallelFor(parts, [&](int64_t part, int) {
    const int64_t begin = outer * part / parts, end = outer * (part + 1) / parts;
    copy(from + begin * dims[0].src * elem_bytes, to + begin * dims[0].dst * elem_bytes,
         end - begin);
  });
}

void CanonicalizeCopyDims(CopyDims& dims) {
  size_t n = 0;
  for (const CopyDim& d : dims) {
    if (d.size == 1) continue;
    if (n > 0 && dims[n - 1].src == d.src * d.size && dims[n - 1].dst == d.dst * d.size) {
      dims[n - 1] = {dims[n - 1].size * d.size, d.src, d.dst};
    } else {
      dims[n++] = d;
    }
  }
  dims.resize(n);
}

void TransposeBytes(const void* in, std::span<const int64_t> in_dims, std::span<const int64_t> perm,
                    int64_t elem_bytes, void* out) {
  const DimensionVector in_strides = RowMajorStrides(in_dims);
  DimensionVector sizes, src;
  for (int64_t p : perm) {
    sizes.push_back(in_dims[p]);
    src.push_back(in_strides[p]);
  }
  StridedCopy(in, out, RowMajorDims(sizes, src), elem_bytes);
}

void CheckShapeOp(const HloInstruction& instr) {
  const Shape& shape = instr.shape();
  WEFT_CHECK(shape.IsArray(), "{} with a tuple result is not supported",
             HloOpcodeString(instr.opcode()));
  const int64_t width = ByteWidth(shape.element_type());
  WEFT_CHECK(width == 1 || width == 2 || width == 4 || width == 8, "{}-byte elements", width);
}

Value EvalShapeOp(const HloInstruction& instr, EvalArgs& args) {
  switch (instr.opcode()) {
    case HloOpcode::kReshape:
    case HloOpcode::kBitcastConvert:  // the same bytes, reinterpreted
      return Value{args.array(0).Reshaped(instr.shape())};
    case HloOpcode::kBroadcast:
      return EvalBroadcast(instr, args);
    case HloOpcode::kTranspose:
      return EvalTranspose(instr, args);
    case HloOpcode::kSlice: {
      DimensionVector starts, strides;
      for (const SliceDim& s : instr.attrs().slice) {
        starts.push_back(s.start);
        strides.push_back(s.stride);
      }
      return SliceOf(instr, args, starts, strides);
    }
    case HloOpcode::kDynamicSlice: {
      const DimensionVector starts =
          DynamicStarts(args, 1, args.array(0).dimensions(), instr.shape().dimensions());
      return SliceOf(instr, args, starts, DimensionVector(starts.size(), 1));
    }
    case HloOpcode::kDynamicUpdateSlice:
      return EvalDynamicUpdateSlice(instr, args);
    case HloOpcode::kConcatenate:
      return EvalConcatenate(instr, args);
    case HloOpcode::kPad:
      return EvalPad(instr, args);
    case HloOpcode::kIota:
      return EvalIota(instr, args);
    case HloOpcode::kReverse:
      return EvalReverse(instr, args);
    default:
      Fail("{} is not a shape op", HloOpcodeString(instr.opcode()));
  }
}

Value EvalIdentity(const HloInstruction& instr, EvalArgs& args) {
  // custom_call_target="Sharding" only pins a sharding, and a memory-space
  // move (IsMemorySpaceMoveTarget) moves within weft's one memory: the value
  // passes.
  HostTensor out = args.ctx().Allocate(instr.shape());
  std::memcpy(out.mutable_raw_data(), args.array(0).raw_data(),
              static_cast<size_t>(out.byte_size()));
  return Value{std::move(out)};
}

void CheckAllocateBuffer(const HloInstruction& instr) {
  WEFT_CHECK(instr.operand_count() == 0 && instr.shape().IsArray(),
             "{}: an AllocateBuffer custom call takes no operand and gives an array, not {} "
             "operand(s) and {}",
             instr.Describe(), instr.operand_count(), instr.shape().ToString());
}

Value EvalAllocateBuffer(const HloInstruction& instr, EvalArgs& args) {
  // Its contents are unspecified (compiler/dead_loop_init.h): whatever the
  // buffer held.
  return Value{args.ctx().Allocate(instr.shape())};
}

Value EvalAfterAll(const HloInstruction& instr, EvalArgs& args) {
  // A token orders side effects and holds no bytes; the executor runs in
  // schedule order, which already respects the tokens' data dependencies.
  return Value{args.ctx().Allocate(instr.shape())};
}

}  // namespace weft::runtime::exec
