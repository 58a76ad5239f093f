// sort and topk: every row along one dimension is ordered on its own. sort
// orders by its comparator computation (interpreted per comparison, as
// reduce interprets reducers it has no fast path for; a comparator of keys
// per element, SortKeysOf, has each key computed once), always stably, so
// the order of equal keys is the same on one device and on many; topk takes
// the k largest (or smallest) in compare's total order, ties to the lower
// index.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "executor_eval.h"
#include "weft/base/error.h"

namespace weft::runtime::exec {
namespace {

// The rows of an array along `dim`: row r's element k is element
// Start(r) + k * stride of the buffer.
struct Rows {
  int64_t count = 1, length = 0, stride = 1;
  Rows(const std::vector<int64_t>& dims, int64_t dim) : length(dims.at(dim)) {
    for (size_t d = 0; d < dims.size(); ++d) {
      if (static_cast<int64_t>(d) == dim) continue;
      count *= dims[d];
      if (static_cast<int64_t>(d) > dim) stride *= dims[d];
    }
  }
  int64_t Start(int64_t r) const { return (r / stride) * length * stride + r % stride; }
  // Rows per thread-pool task: about 4096 elements.
  int64_t Chunk() const { return std::max<int64_t>(1, 4096 / std::max<int64_t>(1, length)); }
};

// Element `from` of `in` copied to element `to` of `out` (same type).
void CopyElement(const HostTensor& in, int64_t from, HostTensor& out, int64_t to) {
  const int64_t width = ByteWidth(in.element_type());
  std::memcpy(static_cast<std::byte*>(out.mutable_raw_data()) + to * width,
              static_cast<const std::byte*>(in.raw_data()) + from * width,
              static_cast<size_t>(width));
}

}  // namespace

void CheckSort(const HloInstruction& instr) {
  if (instr.opcode() == HloOpcode::kSort) {
    ScalarFunction check(*instr.to_apply());  // throws when it cannot be interpreted
    return;
  }
  WEFT_CHECK(instr.operand_count() == 1 && instr.operand(0)->shape().IsArray() &&
                 instr.operand(0)->shape().rank() >= 1,
             "top-k takes one array operand of rank >= 1");
  const Shape& x = instr.operand(0)->shape();
  const PrimitiveType t = x.element_type();
  WEFT_CHECK(IsFloatingPoint(t) || IsInteger(t), "top-k of {} is not supported",
             PrimitiveTypeName(t));
  // The TopK custom call's result is opaque to shape inference: checked here.
  const Shape& out = instr.shape();
  const bool ok = out.IsTuple() && out.tuple_shapes().size() == 2 &&
                  out.tuple_shapes(0).IsArray() && out.tuple_shapes(0).element_type() == t &&
                  out.tuple_shapes(1).IsArray() &&
                  out.tuple_shapes(1).element_type() == PrimitiveType::kS32 &&
                  out.tuple_shapes(0).dimensions() == out.tuple_shapes(1).dimensions() &&
                  out.tuple_shapes(0).rank() == x.rank();
  std::vector<int64_t> lead = x.dimensions();
  lead.pop_back();
  const std::vector<int64_t> got =
      ok ? std::vector<int64_t>(out.tuple_shapes(0).dimensions().begin(),
                                out.tuple_shapes(0).dimensions().end() - 1)
         : std::vector<int64_t>();
  WEFT_CHECK(ok && got == lead && out.tuple_shapes(0).dimensions().back() <= x.dimensions().back(),
             "top-k of {} must return ({}[..., k], s32[..., k]) with k <= {} and the operand's "
             "leading dims, got {}",
             x.ToString(), PrimitiveTypeName(t), x.dimensions().back(), out.ToString());
}

Value EvalSort(const HloInstruction& instr, EvalArgs& args) {
  const int64_t n = args.size();
  const Rows rows(args.array(0).dimensions(), instr.dimensions().at(0));
  Value out;
  for (int64_t i = 0; i < n; ++i) out.push_back(args.ctx().Allocate(args.array(i).shape()));
  const ScalarFunction less(*instr.to_apply());
  // A comparator of keys per element: each key computed once, compared
  // natively (the same order: strict comparisons of the same values).
  const std::optional<std::vector<SortKey>> by_key = SortKeysOf(*instr.to_apply());
  const int64_t levels = by_key ? static_cast<int64_t>(by_key->size()) : 0;
  const int64_t len = rows.length;
  ParallelRanges(rows.count, rows.Chunk(), args.ctx().options().use_thread_pool,
                 [&](int64_t begin, int64_t end) {
                   std::vector<double> keys(static_cast<size_t>(n * len)), call(2 * n);
                   std::vector<double> element_key(static_cast<size_t>(levels * len));
                   std::vector<int64_t> order(static_cast<size_t>(len));
                   double result = 0;
                   auto comes_first = [&](int64_t a, int64_t b) {
                     for (int64_t l = 0; l < levels; ++l) {
                       const SortKey& k = (*by_key)[l];
                       const double x = element_key[l * len + a], y = element_key[l * len + b];
                       bool before, after;
                       if (k.total_order) {
                         const int64_t kx = TotalOrderKey(x), ky = TotalOrderKey(y);
                         before = k.greater ? kx > ky : kx < ky;
                         after = k.greater ? ky > kx : ky < kx;
                       } else {
                         before = k.greater ? x > y : x < y;
                         after = k.greater ? y > x : y < x;
                       }
                       if (before || after) return before;
                       if (l + 1 == levels) return false;
                     }
                     for (int64_t i = 0; i < n; ++i) {
                       call[2 * i] = keys[i * len + a];
                       call[2 * i + 1] = keys[i * len + b];
                     }
                     less.Call(call, std::span<double>(&result, 1));
                     return result != 0;
                   };
                   for (int64_t r = begin; r < end; ++r) {
                     const int64_t start = rows.Start(r);
                     for (int64_t i = 0; i < n; ++i) {
                       const HostTensor& x = args.array(i);
                       for (int64_t k = 0; k < len; ++k) {
                         keys[i * len + k] =
                             LoadAsDouble(x.element_type(), x.raw_data(), start + k * rows.stride);
                       }
                     }
                     for (int64_t l = 0; l < levels; ++l) {
                       const SortKey& k = (*by_key)[l];
                       const double* values = keys.data() + k.operand * len;
                       for (int64_t e = 0; e < len; ++e) {
                         call[2 * k.operand] = values[e];
                         k.key.Call(call, std::span<double>(&element_key[l * len + e], 1));
                       }
                     }
                     std::iota(order.begin(), order.end(), 0);
                     std::stable_sort(order.begin(), order.end(), comes_first);
                     for (int64_t i = 0; i < n; ++i) {
                       for (int64_t k = 0; k < len; ++k) {
                         CopyElement(args.array(i), start + order[k] * rows.stride, out[i],
                                     start + k * rows.stride);
                       }
                     }
                   }
                 });
  return out;
}

// topk (and the TopK custom call): the result's (values, s32 indices) along
// the last dim; the custom call always takes the largest.
Value EvalTopK(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& x = args.array(0);
  const Shape& values_shape = instr.shape().tuple_shapes(0);
  const int64_t k = values_shape.dimensions().back();
  const bool largest = instr.opcode() != HloOpcode::kTopK || instr.attrs().largest;
  const Rows rows(x.dimensions(), x.rank() - 1);
  HostTensor values = args.ctx().Allocate(values_shape);
  HostTensor indices = args.ctx().Allocate(instr.shape().tuple_shapes(1));
  int32_t* index_out = indices.mutable_data<int32_t>();
  const int64_t len = rows.length;
  ParallelRanges(rows.count, rows.Chunk(), args.ctx().options().use_thread_pool,
                 [&](int64_t begin, int64_t end) {
                   std::vector<int64_t> keys(static_cast<size_t>(len)), order(keys.size());
                   auto comes_first = [&](int64_t a, int64_t b) {
                     if (keys[a] != keys[b]) return largest ? keys[a] > keys[b] : keys[a] < keys[b];
                     return a < b;
                   };
                   for (int64_t r = begin; r < end; ++r) {
                     for (int64_t i = 0; i < len; ++i) {
                       keys[i] =
                           TotalOrderKey(LoadAsDouble(x.element_type(), x.raw_data(), r * len + i));
                     }
                     std::iota(order.begin(), order.end(), 0);
                     std::partial_sort(order.begin(), order.begin() + k, order.end(), comes_first);
                     for (int64_t i = 0; i < k; ++i) {
                       CopyElement(x, r * len + order[i], values, r * k + i);
                       index_out[r * k + i] = static_cast<int32_t>(order[i]);
                     }
                   }
                 });
  return Value{std::move(values), std::move(indices)};
}

}  // namespace weft::runtime::exec
