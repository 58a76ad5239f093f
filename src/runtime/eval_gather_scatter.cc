// gather and scatter with XLA's general dimension numbers (batching dims
// included). Both walk the index positions ("batch" positions: every index
// of start_indices but its index_vector_dim), compute the window's start in
// the operand, and copy (gather) or combine (scatter) one window with a
// strided copy/loop. An embedding lookup is one contiguous row per token;
// its gradient is a scatter-add of those rows.
//
// Out-of-range starts follow XLA: gather clamps the window into the operand;
// scatter skips a window that does not fit entirely.
#include <algorithm>
#include <cstring>
#include <optional>

#include "executor_eval.h"
#include "weft/base/algorithm.h"
#include "weft/base/copy_bytes.h"
#include "weft/base/error.h"

namespace weft::runtime::exec {
namespace {

// The index positions of start_indices (all dims but index_vector_dim) and
// how to read the index vector at each.
class IndexWalker {
 public:
  IndexWalker(const HostTensor& indices, int64_t index_vector_dim)
      : indices_(indices), ivd_(index_vector_dim) {
    const std::vector<int64_t>& dims = indices.dimensions();
    const DimensionVector strides = RowMajorStrides(dims);
    for (int64_t d = 0; d < indices.rank(); ++d) {
      if (d == ivd_) {
        vector_stride_ = strides[d];
      } else {
        batch_dims_.push_back(d);
        sizes_.push_back(dims[d]);
        strides_.push_back(strides[d]);
      }
    }
    count_ = 1;
    for (int64_t s : sizes_) count_ *= s;
  }

  int64_t count() const { return count_; }
  // The position's multi-index over the batch dims of start_indices.
  const std::vector<int64_t>& sizes() const { return sizes_; }
  // Index dim of start_indices for batch position dim k.
  int64_t batch_dim(int64_t k) const { return batch_dims_[k]; }
  // Component k of the index vector at a position (by its element offset).
  int64_t Component(int64_t offset, int64_t k) const {
    return LoadAsInt(indices_.element_type(), indices_.raw_data(), offset + k * vector_stride_);
  }
  // Element offset of the index vector at the multi-index `pos`.
  int64_t Offset(const std::vector<int64_t>& pos) const {
    int64_t o = 0;
    for (size_t k = 0; k < pos.size(); ++k) o += pos[k] * strides_[k];
    return o;
  }

 private:
  const HostTensor& indices_;
  int64_t ivd_;
  int64_t vector_stride_ = 0;
  std::vector<int64_t> batch_dims_, sizes_, strides_;
  int64_t count_ = 1;
};

bool Next(std::vector<int64_t>& pos, const std::vector<int64_t>& sizes) {
  for (int64_t k = static_cast<int64_t>(pos.size()) - 1; k >= 0; --k) {
    if (++pos[k] < sizes[k]) return true;
    pos[k] = 0;
  }
  return false;
}

// `dims` with size-1 dims dropped and neighbours contiguous on both sides
// merged; empty when a dim is empty (nothing to copy). A window's dims are
// canonical once per instruction, not once per window.
struct CanonicalDims {
  CopyDims dims;
  bool empty = false;
};
CanonicalDims Canonical(const CopyDims& dims) {
  CanonicalDims c;
  for (const CopyDim& d : dims) {
    if (d.size == 0) {
      c.empty = true;
      return c;
    }
  }
  c.dims = dims;
  CanonicalizeCopyDims(c.dims);
  return c;
}

// Calls fn(dst_offset, src_offset, n, dst_stride, src_stride) for every
// innermost run of the canonical `c`.
template <typename Fn>
void ForEachRun(const CanonicalDims& c, Fn&& fn) {
  if (c.empty) return;
  if (c.dims.empty()) return fn(0, 0, 1, 1, 1);
  const CopyDim inner = c.dims.back();
  const int64_t outer = static_cast<int64_t>(c.dims.size()) - 1;
  OdometerDigits digits(outer);
  int64_t* index = digits.data();
  int64_t s = 0, d = 0;
  for (;;) {
    fn(d, s, inner.size, inner.dst, inner.src);
    int64_t k = outer - 1;
    for (; k >= 0; --k) {
      const CopyDim& dim = c.dims[k];
      if (++index[k] < dim.size) {
        s += dim.src, d += dim.dst;
        break;
      }
      s -= dim.src * (dim.size - 1), d -= dim.dst * (dim.size - 1);
      index[k] = 0;
    }
    if (k < 0) return;
  }
}

// Copies one window (canonical `c`) of elem-byte elements.
void CopyWindow(const std::byte* src, std::byte* dst, const CanonicalDims& c, int64_t elem) {
  if (c.dims.size() == 1 && c.dims[0].src == 1 && c.dims[0].dst == 1) {
    CopyBytes(dst, src, static_cast<size_t>(c.dims[0].size * elem));  // an embedding row
  } else if (!c.empty) {
    StridedCopy(src, dst, c.dims, elem);
  }
}

}  // namespace

void CheckGatherScatter(const HloInstruction& instr) {
  if (instr.opcode() == HloOpcode::kScatter) {
    const int64_t n = (instr.operand_count() - 1) / 2;
    if (n > 1 || ClassifyReducer(*instr.to_apply()) == ReducerKind::kOther) {
      ScalarFunction check(*instr.to_apply());  // variadic: always interpreted
    }
  }
  const int64_t index_operand =
      instr.opcode() == HloOpcode::kScatter ? (instr.operand_count() - 1) / 2 : 1;
  const PrimitiveType t = instr.operand(index_operand)->shape().element_type();
  WEFT_CHECK(IsInteger(t), "{} indices must be integers, got {}", HloOpcodeString(instr.opcode()),
             PrimitiveTypeName(t));
}

Value EvalGather(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& operand = args.array(0);
  const HostTensor& indices = args.array(1);
  const GatherDimensionNumbers& dn = instr.attrs().gather;
  const std::vector<int64_t>& slice = instr.attrs().gather_slice_sizes;
  const Shape& shape = instr.shape();
  HostTensor out = args.ctx().Allocate(shape);
  const DimensionVector in_strides = RowMajorStrides(operand.dimensions());
  const DimensionVector out_strides = RowMajorStrides(shape.dimensions());
  const int64_t elem = ByteWidth(operand.element_type());

  // Window: operand dims that are neither collapsed nor batching, matched
  // in order with offset_dims of the output.
  CopyDims window;
  size_t next_offset = 0;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (Contains(dn.collapsed_slice_dims, d) || Contains(dn.operand_batching_dims, d)) continue;
    window.push_back({slice[d], in_strides[d], out_strides[dn.offset_dims.at(next_offset++)]});
  }
  // Output dims of the index positions, in order.
  std::vector<int64_t> batch_out_dims;
  for (int64_t d = 0; d < shape.rank(); ++d) {
    if (!Contains(dn.offset_dims, d)) batch_out_dims.push_back(d);
  }
  const int64_t ivd = dn.index_vector_dim;
  IndexWalker walker(indices, ivd);
  std::vector<int64_t> pos(walker.sizes().size(), 0);
  const std::byte* src = static_cast<const std::byte*>(operand.raw_data());
  std::byte* dst = static_cast<std::byte*>(out.mutable_raw_data());
  const CanonicalDims canonical = Canonical(window);
  std::vector<int64_t> start(operand.rank(), 0);
  for (int64_t p = 0; p < walker.count(); ++p, Next(pos, walker.sizes())) {
    const int64_t at = walker.Offset(pos);
    int64_t in_offset = 0, out_offset = 0;
    for (size_t k = 0; k < pos.size(); ++k) out_offset += pos[k] * out_strides[batch_out_dims[k]];
    std::fill(start.begin(), start.end(), 0);
    for (size_t k = 0; k < dn.start_index_map.size(); ++k) {
      start[dn.start_index_map[k]] = walker.Component(at, static_cast<int64_t>(k));
    }
    for (size_t k = 0; k < dn.operand_batching_dims.size(); ++k) {
      // The batch position along the matching start_indices dim.
      const int64_t idx_dim = dn.start_indices_batching_dims[k];
      for (size_t j = 0; j < pos.size(); ++j) {
        if (walker.batch_dim(static_cast<int64_t>(j)) == idx_dim) {
          start[dn.operand_batching_dims[k]] = pos[j];
        }
      }
    }
    for (int64_t d = 0; d < operand.rank(); ++d) {
      start[d] = std::clamp<int64_t>(start[d], 0, operand.dimensions()[d] - slice[d]);
      in_offset += start[d] * in_strides[d];
    }
    CopyWindow(src + in_offset * elem, dst + out_offset * elem, canonical, elem);
  }
  return Value{std::move(out)};
}

namespace {

// dst[i * ds] = combine(dst[i * ds], src[i * ss]) for a run.
template <typename T, typename Op>
void CombineRun(T* dst, const T* src, int64_t n, int64_t ds, int64_t ss, Op op) {
  for (int64_t i = 0; i < n; ++i) dst[i * ds] = op(dst[i * ds], src[i * ss]);
}

// Where each in-bounds window of a scatter lands: `fn(op_offset,
// up_offset)` in elements of the operand and the updates, for every index
// position in order; `window` gets the window's dims (src strides the
// updates', dst the operand's).
template <typename Fn>
void ForEachScatterWindow(const HloInstruction& instr, const HostTensor& operand,
                          const HostTensor& indices, const HostTensor& updates, CopyDims* window,
                          Fn&& fn) {
  const ScatterDimensionNumbers& dn = instr.attrs().scatter;
  const DimensionVector op_strides = RowMajorStrides(operand.dimensions());
  const DimensionVector up_strides = RowMajorStrides(updates.dimensions());
  // Window: operand dims not inserted and not batching, matched in order
  // with update_window_dims.
  std::vector<int64_t> window_size(operand.rank(), 1);
  size_t next = 0;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (Contains(dn.inserted_window_dims, d) || Contains(dn.input_batching_dims, d)) continue;
    const int64_t ud = dn.update_window_dims.at(next++);
    window_size[d] = updates.dimensions()[ud];
    window->push_back({window_size[d], up_strides[ud], op_strides[d]});
  }
  std::vector<int64_t> scatter_update_dims;
  for (int64_t d = 0; d < updates.rank(); ++d) {
    if (!Contains(dn.update_window_dims, d)) scatter_update_dims.push_back(d);
  }
  IndexWalker walker(indices, dn.index_vector_dim);
  std::vector<int64_t> pos(walker.sizes().size(), 0);
  std::vector<int64_t> start(operand.rank(), 0);
  for (int64_t p = 0; p < walker.count(); ++p, Next(pos, walker.sizes())) {
    const int64_t at = walker.Offset(pos);
    int64_t up_offset = 0;
    for (size_t k = 0; k < pos.size(); ++k)
      up_offset += pos[k] * up_strides[scatter_update_dims[k]];
    std::fill(start.begin(), start.end(), 0);
    for (size_t k = 0; k < dn.scatter_dims_to_operand_dims.size(); ++k) {
      start[dn.scatter_dims_to_operand_dims[k]] = walker.Component(at, static_cast<int64_t>(k));
    }
    for (size_t k = 0; k < dn.input_batching_dims.size(); ++k) {
      for (size_t j = 0; j < pos.size(); ++j) {
        if (walker.batch_dim(static_cast<int64_t>(j)) == dn.scatter_indices_batching_dims[k]) {
          start[dn.input_batching_dims[k]] = pos[j];
        }
      }
    }
    bool fits = true;
    int64_t op_offset = 0;
    for (int64_t d = 0; d < operand.rank(); ++d) {
      fits = fits && start[d] >= 0 && start[d] + window_size[d] <= operand.dimensions()[d];
      op_offset += start[d] * op_strides[d];
    }
    if (fits) fn(op_offset, up_offset);
  }
}

// The result leaf of operand i: in place of it when the buffer assignment
// says so, else a copy of it.
HostTensor ScatterResult(EvalArgs& args, int64_t i, const Shape& shape) {
  HostTensor out = args.TryReuse(i, shape);
  if (!out.valid()) {
    out = args.ctx().Allocate(shape);
    std::memcpy(out.mutable_raw_data(), args.array(i).raw_data(),
                static_cast<size_t>(out.byte_size()));
  }
  return out;
}

// Several operands and updates: the combiner takes the N accumulators then
// the N updates and returns N values, interpreted per element.
Value EvalVariadicScatter(const HloInstruction& instr, EvalArgs& args) {
  const int64_t n = (args.size() - 1) / 2;
  Value out;
  for (int64_t i = 0; i < n; ++i)
    out.push_back(ScatterResult(args, i, instr.shape().tuple_shapes(i)));
  ScalarFunction fn(*instr.to_apply());
  CopyDims window;
  std::vector<double> call_args(2 * n), result(n);
  std::optional<CanonicalDims> canonical;  // the window's, at the first window
  ForEachScatterWindow(
      instr, args.array(0), args.array(n), args.array(n + 1), &window,
      [&](int64_t op_offset, int64_t up_offset) {
        if (!canonical.has_value()) canonical = Canonical(window);
        ForEachRun(
            *canonical, [&](int64_t d_off, int64_t s_off, int64_t m, int64_t ds, int64_t ss) {
              for (int64_t e = 0; e < m; ++e) {
                const int64_t o = op_offset + d_off + e * ds, u = up_offset + s_off + e * ss;
                for (int64_t i = 0; i < n; ++i) {
                  call_args[i] = LoadAsDouble(out[i].element_type(), out[i].raw_data(), o);
                  const HostTensor& up = args.array(n + 1 + i);
                  call_args[n + i] = LoadAsDouble(up.element_type(), up.raw_data(), u);
                }
                fn.Call(call_args, result);
                for (int64_t i = 0; i < n; ++i) {
                  StoreDouble(out[i].element_type(), out[i].mutable_raw_data(), o, result[i]);
                }
              }
            });
      });
  return out;
}

}  // namespace

Value EvalScatter(const HloInstruction& instr, EvalArgs& args) {
  if (args.size() > 3) return EvalVariadicScatter(instr, args);
  const HostTensor& updates = args.array(2);
  HostTensor out = ScatterResult(args, 0, instr.shape());
  const PrimitiveType t = out.element_type();
  const int64_t elem = ByteWidth(t);
  const ReducerKind kind = ClassifyReducer(*instr.to_apply());
  std::optional<ScalarFunction> fn;
  if (kind == ReducerKind::kOther ||
      (IsFloatingPoint(t) && t != PrimitiveType::kF32 && kind != ReducerKind::kReplace)) {
    fn.emplace(*instr.to_apply());
  }
  std::byte* dst = static_cast<std::byte*>(out.mutable_raw_data());
  const std::byte* src = static_cast<const std::byte*>(updates.raw_data());
  CopyDims window;
  std::optional<CanonicalDims> canonical;  // the window's, at the first window
  ForEachScatterWindow(
      instr, args.array(0), args.array(1), updates, &window,
      [&](int64_t op_offset, int64_t up_offset) {
        if (!canonical.has_value()) canonical = Canonical(window);
        if (kind == ReducerKind::kReplace) {
          CopyWindow(src + up_offset * elem, dst + op_offset * elem, *canonical, elem);
          return;
        }
        ForEachRun(*canonical, [&](int64_t d_off, int64_t s_off, int64_t n, int64_t ds,
                                   int64_t ss) {
          const int64_t o = op_offset + d_off, u = up_offset + s_off;
          if (fn.has_value()) {
            double call_args[2], result[1];
            for (int64_t i = 0; i < n; ++i) {
              call_args[0] = LoadAsDouble(t, dst, o + i * ds);
              call_args[1] = LoadAsDouble(t, src, u + i * ss);
              fn->Call(call_args, result);
              StoreDouble(t, dst, o + i * ds, result[0]);
            }
            return;
          }
          auto run = [&](auto* tag) {
            using T = std::remove_pointer_t<decltype(tag)>;
            T* dp = reinterpret_cast<T*>(dst) + o;
            const T* sp = reinterpret_cast<const T*>(src) + u;
            switch (kind) {
              case ReducerKind::kAdd:
                return CombineRun(dp, sp, n, ds, ss, [](T a, T b) -> T { return a + b; });
              case ReducerKind::kMultiply:
                return CombineRun(dp, sp, n, ds, ss, [](T a, T b) -> T { return a * b; });
              case ReducerKind::kMaximum:
                return CombineRun(dp, sp, n, ds, ss, [](T a, T b) -> T { return a > b ? a : b; });
              case ReducerKind::kMinimum:
                return CombineRun(dp, sp, n, ds, ss, [](T a, T b) -> T { return a < b ? a : b; });
              default:
                Fail("scatter combiner is not supported for {}", PrimitiveTypeName(t));
            }
          };
          switch (t) {
            case PrimitiveType::kF32:
              return run(static_cast<float*>(nullptr));
            case PrimitiveType::kS32:
              return run(static_cast<int32_t*>(nullptr));
            case PrimitiveType::kS64:
              return run(static_cast<int64_t*>(nullptr));
            case PrimitiveType::kU32:
              return run(static_cast<uint32_t*>(nullptr));
            default: {  // pred and the rest: through the interpreter
              ScalarFunction f(*instr.to_apply());
              double call_args[2], result[1];
              for (int64_t i = 0; i < n; ++i) {
                call_args[0] = LoadAsDouble(t, dst, o + i * ds);
                call_args[1] = LoadAsDouble(t, src, u + i * ss);
                f.Call(call_args, result);
                StoreDouble(t, dst, o + i * ds, result[0]);
              }
            }
          }
        });
      });
  return Value{std::move(out)};
}

}  // namespace weft::runtime::exec
