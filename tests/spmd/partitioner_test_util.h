// Test support for the SPMD partitioner: a small float64 reference interpreter
// for HLO that runs N simulated devices in lockstep (collectives included),
// helpers to split global inputs into per-device pieces and join outputs, and
// the "sharded == unsharded" check used by every partitioner test.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "weft/base/error.h"
#include "weft/hlo/custom_call_targets.h"
#include "weft/hlo/module.h"
#include "weft/hlo/parser.h"
#include "weft/hlo/printer.h"
#include "weft/hlo/ragged_dot.h"
#include "weft/hlo/verifier.h"
#include "weft/spmd/spmd_partitioner.h"

namespace weft::spmd_test {

// An array (data row-major, every element type held as double) or a tuple.
struct Value {
  Shape shape;
  std::vector<double> data;
  std::vector<Value> elements;
};

inline std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * dims[i + 1];
  return s;
}

inline std::vector<int64_t> Unflatten(int64_t flat, const std::vector<int64_t>& dims) {
  std::vector<int64_t> index(dims.size());
  for (int64_t i = static_cast<int64_t>(dims.size()) - 1; i >= 0; --i) {
    index[i] = dims[i] == 0 ? 0 : flat % dims[i];
    if (dims[i] != 0) flat /= dims[i];
  }
  return index;
}

inline int64_t Flatten(const std::vector<int64_t>& index, const std::vector<int64_t>& dims) {
  int64_t flat = 0;
  for (size_t i = 0; i < dims.size(); ++i) flat = flat * dims[i] + index[i];
  return flat;
}

inline Value MakeArray(const Shape& shape, double fill = 0) {
  return Value{shape, std::vector<double>(shape.ElementsCount(), fill), {}};
}

inline double ToInt(double x) {
  if (!std::isfinite(x)) return 0;
  return std::trunc(x);
}

inline double ApplyBinary(HloOpcode op, double a, double b) {
  switch (op) {
    case HloOpcode::kAdd:
      return a + b;
    case HloOpcode::kSubtract:
      return a - b;
    case HloOpcode::kMultiply:
      return a * b;
    case HloOpcode::kDivide:
      return a / b;
    case HloOpcode::kMaximum:
      return std::max(a, b);
    case HloOpcode::kMinimum:
      return std::min(a, b);
    case HloOpcode::kPower:
      return std::pow(a, b);
    case HloOpcode::kAnd:
      return (a != 0 && b != 0) ? 1 : 0;
    case HloOpcode::kOr:
      return (a != 0 || b != 0) ? 1 : 0;
    case HloOpcode::kRemainder:
      return std::fmod(a, b);
    default:
      Fail("reference interpreter: no binary op {}", HloOpcodeString(op));
  }
}

inline double ApplyUnary(HloOpcode op, double x) {
  switch (op) {
    case HloOpcode::kAbs:
      return std::abs(x);
    case HloOpcode::kNegate:
      return -x;
    case HloOpcode::kExp:
      return std::exp(x);
    case HloOpcode::kLog:
      return std::log(x);
    case HloOpcode::kTanh:
      return std::tanh(x);
    case HloOpcode::kSqrt:
      return std::sqrt(x);
    case HloOpcode::kRsqrt:
      return 1 / std::sqrt(x);
    case HloOpcode::kSine:
      return std::sin(x);
    case HloOpcode::kCosine:
      return std::cos(x);
    case HloOpcode::kLogistic:
      return 1 / (1 + std::exp(-x));
    case HloOpcode::kNot:
      return x == 0 ? 1 : 0;
    case HloOpcode::kFloor:
      return std::floor(x);
    case HloOpcode::kCeil:
      return std::ceil(x);
    case HloOpcode::kSign:
      return x > 0 ? 1 : (x < 0 ? -1 : 0);
    default:
      Fail("reference interpreter: no unary op {}", HloOpcodeString(op));
  }
}

// The binary op of a scalar reducer `f(x, y) = op(x, y)`.
inline HloOpcode ReducerOp(const HloComputation* c) {
  const HloInstruction* root = c->root_instruction();
  if (root->operand_count() != 2) Fail("reference interpreter: reducer {} too complex", c->name());
  return root->opcode();
}

// Hook for custom calls: (instruction, operands, device) -> result.
using CustomCallFn = std::function<Value(const HloInstruction&, const std::vector<Value>&)>;

// Runs a module on `n` devices in lockstep.
class Interpreter {
 public:
  Interpreter(const HloModule& module, int64_t n, CustomCallFn custom_call = nullptr)
      : module_(module), n_(n), custom_call_(std::move(custom_call)) {}

  // args[device][parameter] -> root per device.
  std::vector<Value> Run(const std::vector<std::vector<Value>>& args) {
    return Eval(*module_.entry_computation(), args);
  }

 private:
  std::vector<Value> Eval(const HloComputation& c, const std::vector<std::vector<Value>>& params) {
    std::map<const HloInstruction*, std::vector<Value>> values;
    for (const HloInstruction* instr : c.MakeInstructionPostOrder()) {
      std::vector<std::vector<Value>> ops(n_);
      for (int64_t d = 0; d < n_; ++d) {
        for (const HloInstruction* op : instr->operands()) ops[d].push_back(values.at(op)[d]);
      }
      std::vector<Value> out(n_);
      if (IsCollective(instr->opcode())) {
        out = Collective(*instr, ops);
      } else if (instr->opcode() == HloOpcode::kWhile) {
        out = While(*instr, ops);
      } else {
        for (int64_t d = 0; d < n_; ++d) {
          out[d] = instr->opcode() == HloOpcode::kParameter
                       ? params[d].at(instr->parameter_number())
                       : Local(*instr, ops[d], d);
        }
      }
      values[instr] = std::move(out);
    }
    return values.at(c.root_instruction());
  }

  std::vector<Value> While(const HloInstruction& instr, std::vector<std::vector<Value>>& ops) {
    std::vector<std::vector<Value>> state(n_);
    for (int64_t d = 0; d < n_; ++d) state[d] = {ops[d][0]};
    for (int iter = 0;; ++iter) {
      if (iter > 100000) Fail("reference interpreter: while does not end");
      std::vector<Value> cond = Eval(*instr.while_condition(), state);
      for (int64_t d = 1; d < n_; ++d) {
        if (cond[d].data[0] != cond[0].data[0]) Fail("devices disagree on a while condition");
      }
      if (cond[0].data[0] == 0) break;
      std::vector<Value> next = Eval(*instr.while_body(), state);
      for (int64_t d = 0; d < n_; ++d) state[d] = {next[d]};
    }
    std::vector<Value> out(n_);
    for (int64_t d = 0; d < n_; ++d) out[d] = state[d][0];
    return out;
  }

  std::vector<std::vector<int64_t>> Groups(const HloInstruction& instr) {
    if (!instr.attrs().replica_groups.empty()) return instr.attrs().replica_groups;
    std::vector<int64_t> all(n_);
    for (int64_t d = 0; d < n_; ++d) all[d] = d;
    return {all};
  }

  std::vector<Value> Collective(const HloInstruction& instr, std::vector<std::vector<Value>>& ops) {
    std::vector<Value> out(n_);
    if (instr.opcode() == HloOpcode::kCollectivePermute) {
      for (int64_t d = 0; d < n_; ++d) out[d] = MakeArray(instr.shape(), 0);
      for (auto [s, t] : instr.attrs().source_target_pairs) out[t] = ops[s][0];
      return out;
    }
    for (const std::vector<int64_t>& group : Groups(instr)) {
      const int64_t g = static_cast<int64_t>(group.size());
      const Shape& in_shape = ops[group[0]][0].shape;
      const std::vector<int64_t>& in_dims = in_shape.dimensions();
      switch (instr.opcode()) {
        case HloOpcode::kAllReduce: {
          HloOpcode op = ReducerOp(instr.to_apply());
          Value sum = ops[group[0]][0];
          for (int64_t k = 1; k < g; ++k) {
            for (size_t i = 0; i < sum.data.size(); ++i) {
              sum.data[i] = ApplyBinary(op, sum.data[i], ops[group[k]][0].data[i]);
            }
          }
          for (int64_t d : group) out[d] = sum;
          break;
        }
        case HloOpcode::kAllGather: {
          const int64_t dim = instr.dimensions()[0];
          Value r = MakeArray(instr.shape());
          const std::vector<int64_t>& out_dims = instr.shape().dimensions();
          for (int64_t k = 0; k < g; ++k) {
            const Value& piece = ops[group[k]][0];
            for (int64_t i = 0; i < static_cast<int64_t>(piece.data.size()); ++i) {
              std::vector<int64_t> idx = Unflatten(i, in_dims);
              idx[dim] += k * in_dims[dim];
              r.data[Flatten(idx, out_dims)] = piece.data[i];
            }
          }
          for (int64_t d : group) out[d] = r;
          break;
        }
        case HloOpcode::kReduceScatter: {
          const int64_t dim = instr.dimensions()[0];
          HloOpcode op = ReducerOp(instr.to_apply());
          Value sum = ops[group[0]][0];
          for (int64_t k = 1; k < g; ++k) {
            for (size_t i = 0; i < sum.data.size(); ++i) {
              sum.data[i] = ApplyBinary(op, sum.data[i], ops[group[k]][0].data[i]);
            }
          }
          const std::vector<int64_t>& out_dims = instr.shape().dimensions();
          for (int64_t k = 0; k < g; ++k) {
            Value r = MakeArray(instr.shape());
            for (int64_t i = 0; i < static_cast<int64_t>(r.data.size()); ++i) {
              std::vector<int64_t> idx = Unflatten(i, out_dims);
              idx[dim] += k * out_dims[dim];
              r.data[i] = sum.data[Flatten(idx, in_dims)];
            }
            out[group[k]] = r;
          }
          break;
        }
        case HloOpcode::kAllToAll: {
          const int64_t dim = instr.dimensions()[0];
          const int64_t chunk = in_dims[dim] / g;
          for (int64_t k = 0; k < g; ++k) {
            Value r = MakeArray(instr.shape());
            for (int64_t i = 0; i < static_cast<int64_t>(r.data.size()); ++i) {
              std::vector<int64_t> idx = Unflatten(i, in_dims);
              const int64_t from = idx[dim] / chunk;  // source position in the group
              idx[dim] = k * chunk + idx[dim] % chunk;
              r.data[i] = ops[group[from]][0].data[Flatten(idx, in_dims)];
            }
            out[group[k]] = r;
          }
          break;
        }
        default:
          Fail("reference interpreter: collective {}", HloOpcodeString(instr.opcode()));
      }
    }
    return out;
  }

  Value Local(const HloInstruction& instr, const std::vector<Value>& ops, int64_t device) {
    const Shape& shape = instr.shape();
    const HloAttributes& a = instr.attrs();
    const HloOpcode op = instr.opcode();
    auto idx_of = [&](int64_t i) { return Unflatten(i, shape.dimensions()); };
    if (op == HloOpcode::kTuple) return Value{shape, {}, ops};
    if (op == HloOpcode::kGetTupleElement) return ops[0].elements.at(instr.tuple_index());
    if (op == HloOpcode::kCustomCall) {
      if (IsMemorySpaceMoveTarget(a.custom_call_target)) return ops.at(0);
      if (!custom_call_) Fail("reference interpreter: no custom call hook");
      return custom_call_(instr, ops);
    }
    Value r = MakeArray(shape);
    const int64_t count = static_cast<int64_t>(r.data.size());
    switch (op) {
      case HloOpcode::kConstant:
        for (int64_t i = 0; i < count; ++i) r.data[i] = a.literal.Get(i);
        return r;
      case HloOpcode::kIota:
        for (int64_t i = 0; i < count; ++i) r.data[i] = idx_of(i)[a.iota_dimension];
        return r;
      case HloOpcode::kPartitionId:
        r.data[0] = static_cast<double>(device);
        return r;
      case HloOpcode::kCompare:
        for (int64_t i = 0; i < count; ++i) {
          r.data[i] = Holds(a.comparison_direction, ops[0].data[i], ops[1].data[i]) ? 1 : 0;
        }
        return r;
      case HloOpcode::kSelect:
        for (int64_t i = 0; i < count; ++i) {
          const double p = ops[0].data.size() == 1 ? ops[0].data[0] : ops[0].data[i];
          r.data[i] = p != 0 ? ops[1].data[i] : ops[2].data[i];
        }
        return r;
      case HloOpcode::kClamp:
        for (int64_t i = 0; i < count; ++i) {
          auto at = [&](int k) {
            return ops[k].data.size() == 1 ? ops[k].data[0] : ops[k].data[i];
          };
          r.data[i] = std::min(std::max(at(1), at(0)), at(2));
        }
        return r;
      case HloOpcode::kConvert:
      case HloOpcode::kCopy:
        for (int64_t i = 0; i < count; ++i) {
          const double x = ops[0].data[i];
          const PrimitiveType t = shape.element_type();
          r.data[i] = t == PrimitiveType::kPred ? (x != 0) : (IsInteger(t) ? ToInt(x) : x);
        }
        return r;
      case HloOpcode::kBroadcast:
        for (int64_t i = 0; i < count; ++i) {
          std::vector<int64_t> idx = idx_of(i), src;
          for (int64_t d : a.dimensions) src.push_back(idx[d]);
          r.data[i] = ops[0].data[Flatten(src, ops[0].shape.dimensions())];
        }
        return r;
      case HloOpcode::kReshape:
        r.data = ops[0].data;
        return r;
      case HloOpcode::kTranspose:
        for (int64_t i = 0; i < count; ++i) {
          std::vector<int64_t> idx = idx_of(i), src(idx.size());
          for (size_t k = 0; k < idx.size(); ++k) src[a.dimensions[k]] = idx[k];
          r.data[i] = ops[0].data[Flatten(src, ops[0].shape.dimensions())];
        }
        return r;
      case HloOpcode::kReverse:
        for (int64_t i = 0; i < count; ++i) {
          std::vector<int64_t> idx = idx_of(i);
          for (int64_t d : a.dimensions) idx[d] = shape.dimensions(d) - 1 - idx[d];
          r.data[i] = ops[0].data[Flatten(idx, shape.dimensions())];
        }
        return r;
      case HloOpcode::kSlice:
        for (int64_t i = 0; i < count; ++i) {
          std::vector<int64_t> idx = idx_of(i);
          for (size_t k = 0; k < idx.size(); ++k)
            idx[k] = a.slice[k].start + idx[k] * a.slice[k].stride;
          r.data[i] = ops[0].data[Flatten(idx, ops[0].shape.dimensions())];
        }
        return r;
      case HloOpcode::kDynamicSlice:
      case HloOpcode::kDynamicUpdateSlice: {
        const bool update = op == HloOpcode::kDynamicUpdateSlice;
        const std::vector<int64_t>& full = ops[0].shape.dimensions();
        const std::vector<int64_t>& part = update ? ops[1].shape.dimensions() : shape.dimensions();
        std::vector<int64_t> start(full.size());
        for (size_t k = 0; k < full.size(); ++k) {
          const int64_t s = static_cast<int64_t>(ops[(update ? 2 : 1) + k].data[0]);
          start[k] = std::clamp<int64_t>(s, 0, full[k] - part[k]);
        }
        if (update) r = ops[0];
        const int64_t part_count = update ? ops[1].shape.ElementsCount() : count;
        for (int64_t i = 0; i < part_count; ++i) {
          std::vector<int64_t> idx = Unflatten(i, part);
          for (size_t k = 0; k < idx.size(); ++k) idx[k] += start[k];
          if (update) {
            r.data[Flatten(idx, full)] = ops[1].data[i];
          } else {
            r.data[i] = ops[0].data[Flatten(idx, full)];
          }
        }
        return r;
      }
      case HloOpcode::kConcatenate: {
        const int64_t dim = a.dimensions[0];
        int64_t offset = 0;
        for (const Value& piece : ops) {
          for (int64_t i = 0; i < static_cast<int64_t>(piece.data.size()); ++i) {
            std::vector<int64_t> idx = Unflatten(i, piece.shape.dimensions());
            idx[dim] += offset;
            r.data[Flatten(idx, shape.dimensions())] = piece.data[i];
          }
          offset += piece.shape.dimensions(dim);
        }
        return r;
      }
      case HloOpcode::kPad: {
        std::fill(r.data.begin(), r.data.end(), ops[1].data[0]);
        for (int64_t i = 0; i < static_cast<int64_t>(ops[0].data.size()); ++i) {
          std::vector<int64_t> idx = Unflatten(i, ops[0].shape.dimensions());
          bool inside = true;
          for (size_t k = 0; k < idx.size(); ++k) {
            idx[k] = a.padding[k].low + idx[k] * (a.padding[k].interior + 1);
            inside = inside && idx[k] >= 0 && idx[k] < shape.dimensions(k);
          }
          if (inside) r.data[Flatten(idx, shape.dimensions())] = ops[0].data[i];
        }
        return r;
      }
      case HloOpcode::kDot:
        return Dot(instr, ops);
      case HloOpcode::kRaggedDot:
        return RaggedDot(instr, ops);
      case HloOpcode::kReduce: {
        const HloOpcode reducer = ReducerOp(instr.to_apply());
        std::fill(r.data.begin(), r.data.end(), ops[1].data[0]);
        const std::vector<int64_t>& in_dims = ops[0].shape.dimensions();
        for (int64_t i = 0; i < static_cast<int64_t>(ops[0].data.size()); ++i) {
          std::vector<int64_t> idx = Unflatten(i, in_dims), kept;
          for (int64_t d = 0; d < static_cast<int64_t>(idx.size()); ++d) {
            if (std::find(a.dimensions.begin(), a.dimensions.end(), d) == a.dimensions.end()) {
              kept.push_back(idx[d]);
            }
          }
          double& acc = r.data[Flatten(kept, shape.dimensions())];
          acc = ApplyBinary(reducer, acc, ops[0].data[i]);
        }
        return r;
      }
      default:
        break;
    }
    if (IsElementwiseUnary(op)) {
      for (int64_t i = 0; i < count; ++i) r.data[i] = ApplyUnary(op, ops[0].data[i]);
      return r;
    }
    if (IsElementwiseBinary(op)) {
      for (int64_t i = 0; i < count; ++i)
        r.data[i] = ApplyBinary(op, ops[0].data[i], ops[1].data[i]);
      return r;
    }
    Fail("reference interpreter: unsupported op {}", instr.Describe());
  }

  Value Dot(const HloInstruction& instr, const std::vector<Value>& ops) {
    const DotDimensionNumbers& dn = instr.attrs().dot;
    const Shape& ls = ops[0].shape;
    const Shape& rs = ops[1].shape;
    auto free_dims = [](const Shape& s, const std::vector<int64_t>& b,
                        const std::vector<int64_t>& c) {
      std::vector<int64_t> f;
      for (int64_t d = 0; d < s.rank(); ++d) {
        if (std::find(b.begin(), b.end(), d) == b.end() &&
            std::find(c.begin(), c.end(), d) == c.end()) {
          f.push_back(d);
        }
      }
      return f;
    };
    const std::vector<int64_t> lf = free_dims(ls, dn.lhs_batch_dims, dn.lhs_contracting_dims);
    const std::vector<int64_t> rf = free_dims(rs, dn.rhs_batch_dims, dn.rhs_contracting_dims);
    std::vector<int64_t> cdims;
    for (int64_t d : dn.lhs_contracting_dims) cdims.push_back(ls.dimensions(d));
    int64_t csize = 1;
    for (int64_t c : cdims) csize *= c;
    Value r = MakeArray(instr.shape());
    const int64_t nb = static_cast<int64_t>(dn.lhs_batch_dims.size());
    for (int64_t i = 0; i < static_cast<int64_t>(r.data.size()); ++i) {
      std::vector<int64_t> o = Unflatten(i, instr.shape().dimensions());
      std::vector<int64_t> li(ls.rank()), ri(rs.rank());
      for (int64_t k = 0; k < nb; ++k) {
        li[dn.lhs_batch_dims[k]] = o[k];
        ri[dn.rhs_batch_dims[k]] = o[k];
      }
      for (size_t k = 0; k < lf.size(); ++k) li[lf[k]] = o[nb + k];
      for (size_t k = 0; k < rf.size(); ++k) ri[rf[k]] = o[nb + lf.size() + k];
      double acc = 0;
      for (int64_t c = 0; c < csize; ++c) {
        std::vector<int64_t> ci = Unflatten(c, cdims);
        for (size_t k = 0; k < ci.size(); ++k) {
          li[dn.lhs_contracting_dims[k]] = ci[k];
          ri[dn.rhs_contracting_dims[k]] = ci[k];
        }
        acc +=
            ops[0].data[Flatten(li, ls.dimensions())] * ops[1].data[Flatten(ri, rs.dimensions())];
      }
      r.data[i] = acc;
    }
    return r;
  }

  // ragged-dot (hlo/ragged_dot.h): each lhs element's group from the running
  // sums of its group_sizes row; the non-contracting mode reads that group's
  // rhs (0 past the total), the contracting mode adds each product to its
  // group's result, the batch mode is the dot.
  Value RaggedDot(const HloInstruction& instr, const std::vector<Value>& ops) {
    const HloAttributes& a = instr.attrs();
    const DotDimensionNumbers& dn = a.dot;
    const Shape& ls = ops[0].shape;
    const Shape& rs = ops[1].shape;
    const Value& sizes = ops[2];
    const RaggedDotMode mode = RaggedDotModeOf(instr);
    const int64_t ragged = a.lhs_ragged_dims[0];
    const int64_t g = sizes.shape.dimensions().back();
    const std::vector<int64_t> prefix =
        sizes.shape.rank() == 1 ? std::vector<int64_t>{} : RaggedDotPrefix(instr);
    auto group_of = [&](const std::vector<int64_t>& li) -> int64_t {
      int64_t row = 0;
      for (int64_t d : prefix) row = row * ls.dimensions(d) + li[d];
      int64_t start = 0;
      for (int64_t j = 0; j < g; ++j) {
        const int64_t stop =
            start + std::max<int64_t>(0, static_cast<int64_t>(sizes.data[row * g + j]));
        if (li[ragged] >= start && li[ragged] < stop) return j;
        start = stop;
      }
      return -1;
    };
    auto is = [](const std::vector<int64_t>& v, int64_t d) {
      return std::find(v.begin(), v.end(), d) != v.end();
    };
    std::vector<int64_t> lf, rf;
    for (int64_t d = 0; d < ls.rank(); ++d) {
      if (!is(dn.lhs_batch_dims, d) && !is(dn.lhs_contracting_dims, d)) lf.push_back(d);
    }
    for (int64_t d = 0; d < rs.rank(); ++d) {
      if (!is(dn.rhs_batch_dims, d) && !is(dn.rhs_contracting_dims, d) && !is(a.rhs_group_dims, d))
        rf.push_back(d);
    }
    Value r = MakeArray(instr.shape());
    const int64_t lead = mode == RaggedDotMode::kContracting ? 1 : 0;
    const int64_t nb = static_cast<int64_t>(dn.lhs_batch_dims.size());
    // Walk every (lhs element, rhs element) pair that a dot multiplies.
    for (int64_t i = 0; i < ls.ElementsCount(); ++i) {
      const std::vector<int64_t> li = Unflatten(i, ls.dimensions());
      const int64_t group = group_of(li);
      if (mode != RaggedDotMode::kBatch && group < 0) continue;
      for (int64_t j = 0; j < rs.ElementsCount(); ++j) {
        const std::vector<int64_t> ri = Unflatten(j, rs.dimensions());
        bool pair = true;
        for (int64_t k = 0; k < nb; ++k)
          pair = pair && li[dn.lhs_batch_dims[k]] == ri[dn.rhs_batch_dims[k]];
        for (size_t k = 0; k < dn.lhs_contracting_dims.size(); ++k) {
          pair = pair && li[dn.lhs_contracting_dims[k]] == ri[dn.rhs_contracting_dims[k]];
        }
        if (mode == RaggedDotMode::kNonContracting) pair = pair && ri[a.rhs_group_dims[0]] == group;
        if (!pair) continue;
        std::vector<int64_t> o;
        if (lead) o.push_back(group);
        for (int64_t k = 0; k < nb; ++k) o.push_back(li[dn.lhs_batch_dims[k]]);
        for (int64_t d : lf) o.push_back(li[d]);
        for (int64_t d : rf) o.push_back(ri[d]);
        r.data[Flatten(o, instr.shape().dimensions())] += ops[0].data[i] * ops[1].data[j];
      }
    }
    return r;
  }

  const HloModule& module_;
  int64_t n_;
  CustomCallFn custom_call_;
};

// ---------------------------------------------------------------------------
// Splitting and joining values.

inline HloSharding LeafSharding(const HloSharding& s, int64_t i) {
  return s.IsTuple() ? s.tuple_elements().at(i) : s;
}

// Calls fn(local flat index, global flat index) for each element of a
// device's padded tile (tile shape `tile`, tile index `index`) that lies
// inside the global `dims`.
template <typename Fn>
void ForEachTileElement(const std::vector<int64_t>& tile, const std::vector<int64_t>& index,
                        const std::vector<int64_t>& dims, Fn fn) {
  int64_t count = 1;
  for (int64_t t : tile) count *= t;
  for (int64_t i = 0; i < count; ++i) {
    std::vector<int64_t> idx = Unflatten(i, tile);
    bool inside = true;
    for (size_t k = 0; k < idx.size(); ++k) {
      idx[k] += index[k] * tile[k];
      inside = inside && idx[k] < dims[k];
    }
    if (inside) fn(i, Flatten(idx, dims));
  }
}

// Under unreduced axes: device's (index among the devices holding addends
// of one value, their number); {unreduced} spans all n devices.
inline std::pair<int64_t, int64_t> AddendPosition(const HloSharding& sharding, int64_t device,
                                                  int64_t n) {
  if (sharding.IsUnreduced()) return {device, n};
  const int64_t dim = sharding.SubgroupUnreducedDim();
  return {sharding.tile_assignment().IndexOf(device).value()[dim],
          sharding.tile_assignment().dim(dim)};
}

// Device's padded local piece of `global`; padding is NaN (the partitioner
// must never let it reach a result). Under unreduced axes (n devices) the
// piece is the device's addend: unequal shares (k + 1) / (1 + ... + g) of
// a float value, quotients of an integer one with the remainder on the
// group's first device.
inline Value ShardValue(const Value& global, const HloSharding& sharding, int64_t device,
                        int64_t n = 0) {
  if (global.shape.IsTuple()) {
    Value t{global.shape, {}, {}};
    std::vector<Shape> shapes;
    for (size_t i = 0; i < global.elements.size(); ++i) {
      t.elements.push_back(ShardValue(global.elements[i], LeafSharding(sharding, i), device, n));
      shapes.push_back(t.elements.back().shape);
    }
    t.shape = Shape::Tuple(shapes);
    return t;
  }
  if (sharding.HasUnreduced()) {
    Value local = ShardValue(global, sharding.WithoutUnreduced(), device, n);
    const auto [k, g] = AddendPosition(sharding, device, n);
    for (double& x : local.data) {
      if (std::isnan(x)) continue;
      if (IsFloatingPoint(global.shape.element_type())) {
        x *= 2.0 * static_cast<double>(k + 1) / static_cast<double>(g * (g + 1));
      } else {
        const double q = std::trunc(x / static_cast<double>(g));
        x = k == 0 ? x - q * static_cast<double>(g - 1) : q;
      }
    }
    return local;
  }
  const std::vector<int64_t>& dims = global.shape.dimensions();
  if (!sharding.IsTiled()) return global;
  const std::vector<int64_t> tile = sharding.TileShape(dims);
  const std::vector<int64_t> index = sharding.TileIndexForDevice(device);
  Value local =
      MakeArray(global.shape.WithDimensions(tile), std::numeric_limits<double>::quiet_NaN());
  ForEachTileElement(tile, index, dims,
                     [&](int64_t i, int64_t g) { local.data[i] = global.data[g]; });
  return local;
}

// Joins per-device pieces; every device holding an element must agree.
inline Value UnshardValue(const std::vector<Value>& locals, const HloSharding& sharding,
                          const Shape& global_shape, double tolerance) {
  if (global_shape.IsTuple()) {
    Value t{global_shape, {}, {}};
    for (size_t i = 0; i < global_shape.tuple_shapes().size(); ++i) {
      std::vector<Value> parts;
      for (const Value& l : locals) parts.push_back(l.elements.at(i));
      t.elements.push_back(
          UnshardValue(parts, LeafSharding(sharding, i), global_shape.tuple_shapes(i), tolerance));
    }
    return t;
  }
  const std::vector<int64_t>& dims = global_shape.dimensions();
  if (sharding.HasUnreduced()) {  // the sum of each group's addends
    const HloSharding summed = sharding.WithoutUnreduced();
    const int64_t n = static_cast<int64_t>(locals.size());
    Value global = MakeArray(global_shape, 0);
    std::set<std::vector<int64_t>> seen;
    for (int64_t device = 0; device < n; ++device) {
      std::vector<int64_t> index(dims.size(), 0);
      if (summed.IsTiled()) index = summed.TileIndexForDevice(device);
      std::vector<int64_t> key = index;
      key.push_back(AddendPosition(sharding, device, n).first);
      if (!seen.insert(key).second) continue;
      const Value& local = locals[device];
      ForEachTileElement(local.shape.dimensions(), index, dims,
                         [&](int64_t i, int64_t g) { global.data[g] += local.data[i]; });
    }
    return global;
  }
  Value global = MakeArray(global_shape, std::numeric_limits<double>::quiet_NaN());
  for (size_t device = 0; device < locals.size(); ++device) {
    const Value& local = locals[device];
    std::vector<int64_t> index(dims.size(), 0);
    if (sharding.IsTiled()) index = sharding.TileIndexForDevice(static_cast<int64_t>(device));
    ForEachTileElement(local.shape.dimensions(), index, dims, [&](int64_t i, int64_t flat) {
      double& g = global.data[flat];
      if (std::isnan(g)) {
        g = local.data[i];
      } else {
        EXPECT_NEAR(g, local.data[i], tolerance) << "devices disagree at flat " << i;
      }
    });
  }
  return global;
}

inline void ExpectNear(const Value& expected, const Value& actual, double tolerance,
                       const std::string& what) {
  if (expected.shape.IsTuple()) {
    ASSERT_EQ(expected.elements.size(), actual.elements.size()) << what;
    for (size_t i = 0; i < expected.elements.size(); ++i) {
      ExpectNear(expected.elements[i], actual.elements[i], tolerance,
                 what + "{" + std::to_string(i) + "}");
    }
    return;
  }
  ASSERT_EQ(expected.shape, actual.shape) << what;
  int failures = 0;
  for (size_t i = 0; i < expected.data.size() && failures < 5; ++i) {
    const double e = expected.data[i], a = actual.data[i];
    if (e != a && !(std::abs(e - a) <= tolerance * (1 + std::abs(e)))) {
      ADD_FAILURE() << what << ": element " << i << " expected " << e << " got " << a;
      ++failures;
    }
  }
}

// Random inputs: floats in [-1, 1] away from 0, integers in [0, int_limit).
inline Value RandomValue(const Shape& shape, std::mt19937_64& rng, int64_t int_limit = 4) {
  if (shape.IsTuple()) {
    Value t{shape, {}, {}};
    for (const Shape& s : shape.tuple_shapes())
      t.elements.push_back(RandomValue(s, rng, int_limit));
    return t;
  }
  Value v = MakeArray(shape);
  std::uniform_real_distribution<double> real(0.1, 1.0);
  std::uniform_int_distribution<int64_t> integer(0, std::max<int64_t>(int_limit - 1, 0));
  std::bernoulli_distribution sign(0.5);
  for (double& x : v.data) {
    if (IsFloatingPoint(shape.element_type())) {
      x = sign(rng) ? real(rng) : -real(rng);
    } else if (shape.element_type() == PrimitiveType::kPred) {
      x = sign(rng) ? 1 : 0;
    } else {
      x = static_cast<double>(integer(rng));
    }
  }
  return v;
}

inline HloSharding ShardingOrReplicated(const HloInstruction* instr) {
  return instr->has_sharding() ? *instr->sharding() : HloSharding::Replicate();
}

// Partitions `module` for `n` devices, runs both on random inputs and checks
// the sharded result equals the unsharded one. Returns the partitioned module
// (already verified and round-tripped through text).
inline std::unique_ptr<HloModule> ExpectShardedEqualsUnsharded(const HloModule& module, int64_t n,
                                                               uint64_t seed = 1,
                                                               CustomCallFn custom_call = nullptr,
                                                               std::vector<Value> inputs = {}) {
  std::mt19937_64 rng(seed);
  const HloComputation* entry = module.entry_computation();
  for (size_t i = inputs.size(); i < entry->parameter_instructions().size(); ++i) {
    inputs.push_back(RandomValue(entry->parameter_instruction(i)->shape(), rng));
  }
  std::vector<Value> expected = Interpreter(module, 1, custom_call).Run({inputs});

  PartitionOptions options;
  options.num_partitions = n;
  std::unique_ptr<HloModule> partitioned = PartitionModule(module, options);
  const std::string text = PrintModule(*partitioned);
  EXPECT_NO_THROW(VerifyHloModule(*partitioned)) << text;
  std::unique_ptr<HloModule> reparsed = ParseHloModule(text);

  std::vector<std::vector<Value>> args(n);
  for (int64_t d = 0; d < n; ++d) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      args[d].push_back(
          ShardValue(inputs[i], ShardingOrReplicated(entry->parameter_instruction(i)), d, n));
    }
  }
  std::vector<Value> locals = Interpreter(*reparsed, n, custom_call).Run(args);
  const HloInstruction* root = entry->root_instruction();
  Value actual = UnshardValue(locals, ShardingOrReplicated(root), root->shape(), 1e-9);
  ExpectNear(expected[0], actual, 1e-9, "result of " + module.name());
  if (::testing::Test::HasFailure()) ADD_FAILURE() << "partitioned module:\n" << text;
  return reparsed;
}

inline std::unique_ptr<HloModule> ExpectShardedEqualsUnsharded(const std::string& hlo, int64_t n,
                                                               uint64_t seed = 1,
                                                               CustomCallFn custom_call = nullptr) {
  std::unique_ptr<HloModule> module = ParseHloModule(hlo);
  return ExpectShardedEqualsUnsharded(*module, n, seed, std::move(custom_call));
}

// Instructions of `module` (all computations) with `opcode`.
inline std::vector<const HloInstruction*> FindAll(const HloModule& module, HloOpcode opcode) {
  std::vector<const HloInstruction*> found;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      if (instr->opcode() == opcode) found.push_back(instr);
    }
  }
  return found;
}

inline const HloInstruction* FindNamed(const HloModule& module, const std::string& name) {
  for (const HloComputation* c : module.computations()) {
    if (const HloInstruction* instr = c->GetInstruction(name)) return instr;
  }
  return nullptr;
}

inline int64_t CountCollectives(const HloModule& module) {
  int64_t count = 0;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) count += IsCollective(instr->opcode());
  }
  return count;
}

}  // namespace weft::spmd_test
