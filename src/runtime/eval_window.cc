// reduce-window and select-and-scatter: windows slid over an array (XLA's
// window: size, stride, low/high padding, base dilation = lhs_dilate,
// window dilation = rhs_dilate). Padding and the holes base dilation opens
// hold no element: a window visits only the operand elements it covers, as
// XLA's evaluator does, so reduce-window folds those into its init value and
// select-and-scatter never selects padding. Both run their computations
// through the scalar interpreter, rounding every step to the element type.
#include <algorithm>

#include "executor_eval.h"
#include "weft/base/error.h"

namespace weft::runtime::exec {
namespace {

// The multi-index of linear element `i` of a row-major array of `dims`.
std::vector<int64_t> Unravel(int64_t i, const std::vector<int64_t>& dims) {
  std::vector<int64_t> index(dims.size());
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    index[d] = dims[d] == 0 ? 0 : i % dims[d];
    i = dims[d] == 0 ? 0 : i / dims[d];
  }
  return index;
}

// Calls fn(e) for the linear index e of every element of an array of
// `dims` that the window at position `at` covers, in row-major window order.
template <typename Fn>
void ForEachInWindow(const std::vector<int64_t>& dims, const std::vector<WindowDim>& window,
                     const std::vector<int64_t>& at, Fn fn) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<int64_t> k(rank, 0);
  for (;;) {
    int64_t e = 0;
    bool inside = true;
    for (int64_t d = 0; d < rank && inside; ++d) {
      const WindowDim& w = window[d];
      const int64_t pos = at[d] * w.stride + k[d] * w.window_dilation - w.padding_low;
      inside = pos >= 0 && pos % w.base_dilation == 0 && pos / w.base_dilation < dims[d];
      e = e * dims[d] + pos / w.base_dilation;
    }
    if (inside) fn(e);
    int64_t d = rank - 1;
    for (; d >= 0; --d) {
      if (++k[d] < window[d].size) break;
      k[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace

void CheckWindowOp(const HloInstruction& instr) {
  for (const HloComputation* c : instr.called_computations()) {
    ScalarFunction check(*c);  // throws when it cannot be interpreted
  }
}

Value EvalReduceWindow(const HloInstruction& instr, EvalArgs& args) {
  const int64_t n = args.size() / 2;
  const std::vector<Shape> out_shapes = instr.shape().Leaves();
  const std::vector<int64_t>& in_dims = args.array(0).dimensions();
  const std::vector<int64_t>& out_dims = out_shapes[0].dimensions();
  Value out;
  for (const Shape& s : out_shapes) out.push_back(args.ctx().Allocate(s));
  const ScalarFunction fn(*instr.to_apply());
  ParallelRanges(out_shapes[0].ElementsCount(), 256, args.ctx().options().use_thread_pool,
                 [&](int64_t begin, int64_t end) {
                   std::vector<double> call(2 * n), acc(n);
                   for (int64_t o = begin; o < end; ++o) {
                     for (int64_t i = 0; i < n; ++i) {
                       const HostTensor& init = args.array(n + i);
                       acc[i] = LoadAsDouble(init.element_type(), init.raw_data(), 0);
                     }
                     ForEachInWindow(
                         in_dims, instr.attrs().window, Unravel(o, out_dims), [&](int64_t e) {
                           for (int64_t i = 0; i < n; ++i) {
                             const HostTensor& x = args.array(i);
                             call[i] = acc[i];
                             call[n + i] = LoadAsDouble(x.element_type(), x.raw_data(), e);
                           }
                           fn.Call(call, acc);
                         });
                     for (int64_t i = 0; i < n; ++i) {
                       StoreDouble(out[i].element_type(), out[i].mutable_raw_data(), o, acc[i]);
                     }
                   }
                 });
  return out;
}

// Each source value goes to the element its window selects (the first
// covered element, replaced by each later one `select` does not keep it
// over), combined there by `scatter`; elements no window selects keep the
// init value. Source positions run in order, as XLA's do.
Value EvalSelectAndScatter(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& operand = args.array(0);
  const HostTensor& source = args.array(1);
  const PrimitiveType t = operand.element_type();
  HostTensor out = args.ctx().Allocate(operand.shape());
  const double init = LoadAsDouble(t, args.array(2).raw_data(), 0);
  for (int64_t e = 0; e < out.element_count(); ++e) StoreDouble(t, out.mutable_raw_data(), e, init);
  const ScalarFunction select(*instr.called_computations()[0]);
  const ScalarFunction scatter(*instr.called_computations()[1]);
  double call[2], result = 0;
  for (int64_t s = 0; s < source.element_count(); ++s) {
    int64_t chosen = -1;
    double chosen_value = 0;
    ForEachInWindow(operand.dimensions(), instr.attrs().window, Unravel(s, source.dimensions()),
                    [&](int64_t e) {
                      const double v = LoadAsDouble(t, operand.raw_data(), e);
                      if (chosen >= 0) {
                        call[0] = chosen_value;
                        call[1] = v;
                        select.Call(call, std::span<double>(&result, 1));
                        if (result != 0) return;
                      }
                      chosen = e;
                      chosen_value = v;
                    });
    if (chosen < 0) continue;
    call[0] = LoadAsDouble(t, out.raw_data(), chosen);
    call[1] = LoadAsDouble(t, source.raw_data(), s);
    scatter.Call(call, std::span<double>(&result, 1));
    StoreDouble(t, out.mutable_raw_data(), chosen, result);
  }
  return Value{std::move(out)};
}

}  // namespace weft::runtime::exec
