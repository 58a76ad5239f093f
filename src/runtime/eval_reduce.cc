// reduce: a fast path for the reducers models use (add, multiply, max, min,
// and, or, xor over one input), and an interpreter of the to_apply
// computation for the rest (variadic reduces such as argmax). Also the
// reducer classification and the scalar interpreter scatter and the
// collectives share.
//
// The fast path merges neighbouring dims that are all reduced or all kept,
// then walks the input in memory order one innermost row at a time: a
// reduced innermost dim folds a contiguous row into one output element; a
// kept one combines the row elementwise into an output row (threads split
// the first dim when it is kept). Floats (bf16 and f16 too, widened a block
// at a time as they are read) accumulate in f32, integers in their own type
// with wrap-around.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "elementwise_kernels.h"
#include "executor_eval.h"
#include "weft/base/error.h"

namespace weft::runtime::exec {

// ---------------------------------------------------------------------------
// Scalar interpreter.

struct ScalarFunction::Program {
  struct Op {
    HloOpcode opcode;
    PrimitiveType type;
    std::vector<int> operands;
    double constant = 0;
    int64_t parameter = 0;
    ComparisonDirection direction = ComparisonDirection::kEq;
    bool total_order = false;                  // compare's type=TOTALORDER
    PrimitiveType from = PrimitiveType::kF32;  // bitcast-convert's operand type
  };
  std::vector<Op> ops;
  std::vector<int> results;  // op indices of the root's leaves
  int64_t num_params = 0;
};

int64_t TotalOrderKey(double v) {
  // IEEE bits of a double order like sign-magnitude integers: flipping the
  // magnitude of negatives makes them two's complement (-NaN < -inf < ...
  // < -0 < +0 < ... < inf < NaN). f32 values widen to double exactly,
  // NaN signs included.
  const int64_t bits = std::bit_cast<int64_t>(v);
  return bits < 0 ? bits ^ std::numeric_limits<int64_t>::max() : bits;
}

namespace {

double Wrap(double v, PrimitiveType t) {
  switch (t) {
    case PrimitiveType::kS32:
      return static_cast<int32_t>(static_cast<int64_t>(v));
    case PrimitiveType::kU16:
      return static_cast<uint16_t>(static_cast<int64_t>(v));
    case PrimitiveType::kU32:
      return static_cast<uint32_t>(static_cast<int64_t>(v));
    case PrimitiveType::kPred:
      return v != 0;
    case PrimitiveType::kS64:
      return static_cast<double>(static_cast<int64_t>(v));
    case PrimitiveType::kU64:
      return static_cast<double>(static_cast<uint64_t>(static_cast<int64_t>(v)));
    default:
      return RoundToType(v, t);
  }
}

double ApplyScalar(const ScalarFunction::Program::Op& op, const double* x) {
  const bool is_float = IsFloatingPoint(op.type);
  auto as_int = [](double v) { return static_cast<int64_t>(v); };
  switch (op.opcode) {
    case HloOpcode::kAdd:
      return x[0] + x[1];
    case HloOpcode::kSubtract:
      return x[0] - x[1];
    case HloOpcode::kMultiply:
      return x[0] * x[1];
    case HloOpcode::kDivide:
      if (is_float) return x[0] / x[1];
      return x[1] == 0 ? -1.0 : std::trunc(x[0] / x[1]);
    case HloOpcode::kRemainder:
      if (is_float) return std::fmod(x[0], x[1]);
      return x[1] == 0 ? x[0] : static_cast<double>(as_int(x[0]) % as_int(x[1]));
    case HloOpcode::kMaximum:
      return std::isnan(x[0]) || x[0] > x[1] ? x[0] : x[1];
    case HloOpcode::kMinimum:
      return std::isnan(x[0]) || x[0] < x[1] ? x[0] : x[1];
    case HloOpcode::kPower:
      return std::pow(x[0], x[1]);
    case HloOpcode::kAnd:
      return static_cast<double>(as_int(x[0]) & as_int(x[1]));
    case HloOpcode::kOr:
      return static_cast<double>(as_int(x[0]) | as_int(x[1]));
    case HloOpcode::kXor:
      return static_cast<double>(as_int(x[0]) ^ as_int(x[1]));
    case HloOpcode::kNot:
      return op.type == PrimitiveType::kPred ? (x[0] == 0) : static_cast<double>(~as_int(x[0]));
    case HloOpcode::kNegate:
      return -x[0];
    case HloOpcode::kAbs:
      return std::fabs(x[0]);
    case HloOpcode::kSign:
      return x[0] > 0 ? 1.0 : (x[0] < 0 ? -1.0 : x[0]);
    case HloOpcode::kExp:
      return std::exp(x[0]);
    case HloOpcode::kExpm1:
      return std::expm1(x[0]);
    case HloOpcode::kLog:
      return std::log(x[0]);
    case HloOpcode::kLog1p:
      return std::log1p(x[0]);
    case HloOpcode::kLogistic:
      return 1.0 / (1.0 + std::exp(-x[0]));
    case HloOpcode::kTanh:
      return std::tanh(x[0]);
    case HloOpcode::kSqrt:
      return std::sqrt(x[0]);
    case HloOpcode::kRsqrt:
      return 1.0 / std::sqrt(x[0]);
    case HloOpcode::kSine:
      return std::sin(x[0]);
    case HloOpcode::kCosine:
      return std::cos(x[0]);
    case HloOpcode::kFloor:
      return std::floor(x[0]);
    case HloOpcode::kCeil:
      return std::ceil(x[0]);
    case HloOpcode::kSelect:
      return x[0] != 0 ? x[1] : x[2];
    case HloOpcode::kClamp:
      return std::min(std::max(x[1], x[0]), x[2]);
    case HloOpcode::kConvert:
    case HloOpcode::kCopy:
      if (IsInteger(op.type) && std::isnan(x[0])) return 0;
      return IsInteger(op.type) ? std::trunc(x[0]) : x[0];
    case HloOpcode::kShiftLeft:
    case HloOpcode::kShiftRightArith:
    case HloOpcode::kShiftRightLogical:
    case HloOpcode::kPopcnt:
    case HloOpcode::kClz: {
      double r = 0;
      DispatchInt(op.type, [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        // Values here are exact in double (a scalar program's integers
        // beyond 2^53 are not), so the conversion back is too.
        auto load = [](double v) {
          if constexpr (std::is_signed_v<T>) {
            return static_cast<T>(static_cast<int64_t>(v));
          } else {
            return static_cast<T>(v < 0 ? static_cast<uint64_t>(static_cast<int64_t>(v))
                                        : static_cast<uint64_t>(v));
          }
        };
        const T a = load(x[0]), b = load(x[1]);
        T out = 0;
        if (op.opcode == HloOpcode::kPopcnt || op.opcode == HloOpcode::kClz) {
          UnaryInt(op.opcode, &a, &out, 1);
        } else {
          BinaryInt(op.opcode, &a, &b, &out, 1);
        }
        r = static_cast<double>(out);
      });
      return r;
    }
    case HloOpcode::kBitcastConvert: {
      // Types of at most 32 bits: every value and bit pattern is exact in a
      // double (the constructor refuses wider ones).
      uint64_t bits = 0;
      StoreDouble(op.from, &bits, 0, x[0]);
      return LoadAsDouble(op.type, &bits, 0);
    }
    case HloOpcode::kCompare:
      if (op.total_order) {
        const int64_t a = TotalOrderKey(x[0]), b = TotalOrderKey(x[1]);
        return Holds(op.direction, a, b);
      }
      return Holds(op.direction, x[0], x[1]);
    default:
      Fail("{} cannot be interpreted on scalars", HloOpcodeString(op.opcode));
  }
}

// The instructions `root` depends on, operands first.
std::vector<const HloInstruction*> PostOrderOf(const HloInstruction* root) {
  std::vector<const HloInstruction*> order;
  std::unordered_set<const HloInstruction*> seen;
  std::vector<std::pair<const HloInstruction*, size_t>> stack = {{root, 0}};
  seen.insert(root);
  while (!stack.empty()) {
    auto& [instr, next] = stack.back();
    if (next < static_cast<size_t>(instr->operand_count())) {
      const HloInstruction* operand = instr->operand(static_cast<int64_t>(next++));
      if (seen.insert(operand).second) stack.push_back({operand, 0});
      continue;
    }
    order.push_back(instr);
    stack.pop_back();
  }
  return order;
}

// Whether `a` computes of parameter 2i what `b` computes of parameter 2i+1.
bool SameFunctionOfSides(const HloInstruction* a, const HloInstruction* b, int64_t i) {
  if (a->opcode() != b->opcode() || a->shape() != b->shape() ||
      a->operand_count() != b->operand_count()) {
    return false;
  }
  switch (a->opcode()) {
    case HloOpcode::kParameter:
      return a->parameter_number() == 2 * i && b->parameter_number() == 2 * i + 1;
    case HloOpcode::kConstant:
      return a->shape().IsScalar() && a->literal().Get(0) == b->literal().Get(0);
    case HloOpcode::kCompare:
      if (a->attrs().comparison_direction != b->attrs().comparison_direction ||
          a->attrs().comparison_type != b->attrs().comparison_type) {
        return false;
      }
      break;
    default:
      break;
  }
  for (int64_t k = 0; k < a->operand_count(); ++k) {
    if (!SameFunctionOfSides(a->operand(k), b->operand(k), i)) return false;
  }
  return true;
}

// `c` as one key's strict comparison of the two sides of operand i.
std::optional<SortKey> KeyComparison(const HloComputation& comparator, const HloInstruction* c) {
  if (c->opcode() != HloOpcode::kCompare) return std::nullopt;
  const ComparisonDirection direction = c->attrs().comparison_direction;
  if (direction != ComparisonDirection::kLt && direction != ComparisonDirection::kGt) {
    return std::nullopt;
  }
  for (int64_t i = 0; 2 * i + 1 < comparator.num_parameters(); ++i) {
    if (!SameFunctionOfSides(c->operand(0), c->operand(1), i)) continue;
    return SortKey{i, direction == ComparisonDirection::kGt,
                   c->attrs().comparison_type == "TOTALORDER",
                   ScalarFunction(comparator, c->operand(0))};
  }
  return std::nullopt;
}

bool AppendKeys(const HloComputation& comparator, const HloInstruction* r,
                std::vector<SortKey>& keys) {
  if (std::optional<SortKey> key = KeyComparison(comparator, r)) {
    keys.push_back(std::move(*key));
    return true;
  }
  // select(compare(c, c', EQ), tie, c): c decides unless neither side is
  // before the other.
  if (r->opcode() != HloOpcode::kSelect) return false;
  const HloInstruction* equal = r->operand(0);
  const HloInstruction* c = r->operand(2);
  if (equal->opcode() != HloOpcode::kCompare ||
      equal->attrs().comparison_direction != ComparisonDirection::kEq ||
      c->opcode() != HloOpcode::kCompare) {
    return false;
  }
  const HloInstruction* swapped = equal->operand(0) == c ? equal->operand(1) : equal->operand(0);
  if ((equal->operand(0) != c && equal->operand(1) != c) ||
      swapped->opcode() != HloOpcode::kCompare || swapped->operand(0) != c->operand(1) ||
      swapped->operand(1) != c->operand(0) ||
      swapped->attrs().comparison_direction != c->attrs().comparison_direction ||
      swapped->attrs().comparison_type != c->attrs().comparison_type) {
    return false;
  }
  std::optional<SortKey> key = KeyComparison(comparator, c);
  if (!key) return false;
  keys.push_back(std::move(*key));
  return AppendKeys(comparator, r->operand(1), keys);
}

}  // namespace

std::optional<std::vector<SortKey>> SortKeysOf(const HloComputation& comparator) {
  std::vector<SortKey> keys;
  if (!AppendKeys(comparator, comparator.root_instruction(), keys)) return std::nullopt;
  return keys;
}

ScalarFunction::ScalarFunction(const HloComputation& computation)
    : ScalarFunction(computation, computation.root_instruction()) {}

ScalarFunction::ScalarFunction(const HloComputation& computation, const HloInstruction* root)
    : program_(std::make_unique<Program>()) {
  program_->num_params = computation.num_parameters();
  std::unordered_map<const HloInstruction*, int> index;
  for (const HloInstruction* instr : PostOrderOf(root)) {
    const HloOpcode op = instr->opcode();
    if (op == HloOpcode::kTuple) {
      WEFT_CHECK(instr == root, "computation '{}': only its root may be a tuple",
                 computation.name());
      for (const HloInstruction* operand : instr->operands()) {
        program_->results.push_back(index.at(operand));
      }
      continue;
    }
    WEFT_CHECK(instr->shape().IsScalar(),
               "computation '{}' is interpreted per element, so '{}' must be a scalar, not {}",
               computation.name(), instr->name(), instr->shape().ToString());
    WEFT_CHECK(op == HloOpcode::kParameter || op == HloOpcode::kConstant ||
                   op == HloOpcode::kBitcastConvert || IsElementwise(op),
               "computation '{}' is interpreted per element and cannot contain {} ('{}')",
               computation.name(), HloOpcodeString(op), instr->name());
    Program::Op o{op, instr->shape().element_type(), {}};
    if (op == HloOpcode::kBitcastConvert) {
      o.from = instr->operand(0)->shape().element_type();
      WEFT_CHECK(ByteWidth(o.from) <= 4 && ByteWidth(o.from) == ByteWidth(o.type),
                 "computation '{}' is interpreted per element, with values held as doubles: "
                 "'{}' bitcasts {} to {}, which only types of at most 32 bits of the same width "
                 "can be",
                 computation.name(), instr->name(), PrimitiveTypeName(o.from),
                 PrimitiveTypeName(o.type));
    }
    for (const HloInstruction* operand : instr->operands()) o.operands.push_back(index.at(operand));
    if (op == HloOpcode::kConstant) o.constant = instr->literal().Get(0);
    if (op == HloOpcode::kParameter) o.parameter = instr->parameter_number();
    o.direction = instr->attrs().comparison_direction;
    o.total_order = instr->attrs().comparison_type == "TOTALORDER";
    index[instr] = static_cast<int>(program_->ops.size());
    program_->ops.push_back(std::move(o));
  }
  if (program_->results.empty()) program_->results.push_back(index.at(root));
}

ScalarFunction::~ScalarFunction() = default;
ScalarFunction::ScalarFunction(ScalarFunction&&) noexcept = default;

int64_t ScalarFunction::num_results() const {
  return static_cast<int64_t>(program_->results.size());
}

void ScalarFunction::Call(std::span<const double> args, std::span<double> results) const {
  const size_t n = program_->ops.size();
  double stack_values[32];
  std::vector<double> heap_values(n > 32 ? n : 0);
  double* values = n > 32 ? heap_values.data() : stack_values;
  for (size_t i = 0; i < n; ++i) {
    const Program::Op& op = program_->ops[i];
    if (op.opcode == HloOpcode::kParameter) {
      values[i] = args[op.parameter];
    } else if (op.opcode == HloOpcode::kConstant) {
      values[i] = op.constant;
    } else {
      double x[3] = {0, 0, 0};
      for (size_t k = 0; k < op.operands.size() && k < 3; ++k) x[k] = values[op.operands[k]];
      values[i] = Wrap(ApplyScalar(op, x), op.type);
    }
  }
  for (size_t r = 0; r < program_->results.size(); ++r) results[r] = values[program_->results[r]];
}

ReducerKind ClassifyReducer(const HloComputation& computation) {
  if (computation.num_parameters() != 2) return ReducerKind::kOther;
  const HloInstruction* p0 = computation.parameter_instruction(0);
  const HloInstruction* p1 = computation.parameter_instruction(1);
  const HloInstruction* root = computation.root_instruction();
  if (root == p1) return ReducerKind::kReplace;
  if (root->operand_count() != 2) return ReducerKind::kOther;
  const bool params = (root->operand(0) == p0 && root->operand(1) == p1) ||
                      (root->operand(0) == p1 && root->operand(1) == p0);
  if (!params) return ReducerKind::kOther;
  switch (root->opcode()) {
    case HloOpcode::kAdd:
      return ReducerKind::kAdd;
    case HloOpcode::kMultiply:
      return ReducerKind::kMultiply;
    case HloOpcode::kMaximum:
      return ReducerKind::kMaximum;
    case HloOpcode::kMinimum:
      return ReducerKind::kMinimum;
    case HloOpcode::kAnd:
      return ReducerKind::kAnd;
    case HloOpcode::kOr:
      return ReducerKind::kOr;
    case HloOpcode::kXor:
      return ReducerKind::kXor;
    default:
      return ReducerKind::kOther;
  }
}

// ---------------------------------------------------------------------------
// reduce.

namespace {

struct Seg {
  int64_t size;
  bool reduced;
  int64_t out_stride;  // kept segments: stride in the output
};

// Merged segments of the input's dims (size-1 dims dropped).
std::vector<Seg> Segments(const std::vector<int64_t>& dims, const std::vector<int64_t>& reduce) {
  std::vector<Seg> segs;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    const bool r = std::find(reduce.begin(), reduce.end(), static_cast<int64_t>(d)) != reduce.end();
    if (!segs.empty() && segs.back().reduced == r) {
      segs.back().size *= dims[d];
    } else {
      segs.push_back({dims[d], r, 0});
    }
  }
  int64_t stride = 1;
  for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
    if (!it->reduced) {
      it->out_stride = stride;
      stride *= it->size;
    }
  }
  return segs;
}

// Adds a contiguous f32 row with eight partial sums (more accurate, and
// vectorizable).
float SumRow(const float* x, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += x[i + j];
  }
  float tail = 0;
  for (; i < n; ++i) tail += x[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

// Folds a contiguous f32 row by max or min with 16 independent partial
// results: they vectorize, and the chain no longer waits on each compare.
// Max and min are associative, so the value is the sequential fold's (NaN
// propagating; only which of +0 and -0 a tie of zeros returns may differ).
template <typename Op>
float FoldRowPartials(float acc, const float* x, int64_t n, Op op) {
  constexpr int kLanes = 16;
  int64_t i = 0;
  if (n >= kLanes) {
    float p[kLanes];
    for (int j = 0; j < kLanes; ++j) p[j] = x[j];
    for (i = kLanes; i + kLanes <= n; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) p[j] = op(p[j], x[i + j]);
    }
    for (int w = kLanes / 2; w >= 1; w /= 2) {
      for (int j = 0; j < w; ++j) p[j] = op(p[j], p[j + w]);
    }
    acc = op(acc, p[0]);
  }
  for (; i < n; ++i) acc = op(acc, x[i]);
  return acc;
}

// Reads rows of an input of element type In as rows of T: the input itself
// when In is T, else (bf16, f16 into f32) converted into a scratch window of
// at least `block` elements, so that no f32 copy of the whole input is made.
template <typename In, typename T>
class RowReader {
 public:
  RowReader(const In* x, int64_t count, PrimitiveType in_type, int64_t block)
      : x_(x), count_(count), in_type_(in_type), block_(block) {}
  // Elements [offset, offset + n) of x.
  const T* Read(int64_t offset, int64_t n) {
    if constexpr (std::is_same_v<In, T>) {
      return x_ + offset;
    } else {
      if (offset < begin_ || offset + n > end_) {
        begin_ = offset;
        end_ = std::min(count_, offset + std::max(n, block_));
        window_.resize(static_cast<size_t>(end_ - begin_));
        ConvertElements(in_type_, x_ + begin_, PrimitiveType::kF32, window_.data(), end_ - begin_);
      }
      return window_.data() + (offset - begin_);
    }
  }

 private:
  const In* x_;
  int64_t count_;
  PrimitiveType in_type_;
  int64_t block_;
  int64_t begin_ = 0, end_ = 0;
  std::vector<T> window_;
};

// out (pre-filled with the init value) = op over the reduced segments of x,
// read as T (in_type names In for the conversion). fold(acc, row, n) folds a
// contiguous row into acc.
template <typename In, typename T, typename Op, typename Fold>
void ReduceFast(const In* x, int64_t count, PrimitiveType in_type, T* out,
                const std::vector<Seg>& segs, Op op, Fold fold, bool use_pool) {
  constexpr int64_t kBlock = 8192;  // elements converted at a time
  if (segs.empty()) {               // a single element
    RowReader<In, T> reader(x, count, in_type, 1);
    out[0] = op(out[0], reader.Read(0, 1)[0]);
    return;
  }
  const int64_t rank = static_cast<int64_t>(segs.size());
  const Seg inner = segs.back();
  const int64_t outer_rank = rank - 1;
  // Splitting the first segment over threads is safe when it is kept (the
  // tasks write disjoint outputs).
  const bool split = outer_rank >= 1 && !segs[0].reduced;
  int64_t first_stride = 1;  // input elements per index of the first segment
  for (int64_t k = 1; k < rank; ++k) first_stride *= segs[k].size;
  // Indices [first_begin, first_end) of the first segment.
  auto run = [&](int64_t first_begin, int64_t first_end) {
    RowReader<In, T> reader(x, count, in_type, kBlock);
    std::vector<int64_t> index(rank, 0);
    int64_t in = 0, o = 0;
    if (outer_rank >= 1) {
      index[0] = first_begin;
      in = first_begin * first_stride;
      if (!segs[0].reduced) o = first_begin * segs[0].out_stride;
    }
    for (;;) {
      const T* row = reader.Read(in, inner.size);
      if (inner.reduced) {
        out[o] = fold(out[o], row, inner.size);
      } else {
        T* orow = out + o;
        for (int64_t i = 0; i < inner.size; ++i) orow[i] = op(orow[i], row[i]);
      }
      in += inner.size;
      // Odometer over the outer segments.
      int64_t k = outer_rank - 1;
      for (; k >= 0; --k) {
        const int64_t limit = k == 0 ? first_end : segs[k].size;
        if (++index[k] < limit) {
          if (!segs[k].reduced) o += segs[k].out_stride;
          break;
        }
        if (k == 0) return;
        if (!segs[k].reduced) o -= segs[k].out_stride * (segs[k].size - 1);
        index[k] = 0;
      }
      if (k < 0) return;
    }
  };
  if (split) {
    ParallelRanges(segs[0].size, std::max<int64_t>(1, (1 << 16) / first_stride), use_pool, run);
  } else {
    run(0, outer_rank >= 1 ? segs[0].size : 1);
  }
}

template <typename T>
struct Ops {
  static T Add(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = WrapUnsigned<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
  static T Mul(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = WrapUnsigned<T>;
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
  // XLA's max/min propagate NaN.
  static T Max(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a > b ? a : b;
  }
  static T Min(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a < b ? a : b;
  }
};

// The input of a fast reduction: count elements of type In (named by type).
template <typename In>
struct ReduceInput {
  const In* x;
  int64_t count;
  PrimitiveType type;
};

template <typename In, typename T, typename Op>
void ReduceWith(ReduceInput<In> in, T* out, const std::vector<Seg>& segs, Op op, bool use_pool) {
  auto fold = [op](T acc, const T* row, int64_t n) {
    for (int64_t i = 0; i < n; ++i) acc = op(acc, row[i]);
    return acc;
  };
  ReduceFast(in.x, in.count, in.type, out, segs, op, fold, use_pool);
}

// Reducers are passed as lambdas, never as function pointers: a pointer
// reaches the row loops through std::function as a runtime value, and the
// loops would call it per element instead of vectorizing.
template <typename In, typename T>
void ReduceTyped(ReducerKind kind, ReduceInput<In> x, T* out, const std::vector<Seg>& segs,
                 bool use_pool) {
  using O = Ops<T>;
  switch (kind) {
    case ReducerKind::kAdd:
      if constexpr (std::is_same_v<T, float>) {
        auto fold = [](float acc, const float* row, int64_t n) { return acc + SumRow(row, n); };
        return ReduceFast(
            x.x, x.count, x.type, out, segs, [](T a, T b) { return O::Add(a, b); }, fold, use_pool);
      } else {
        return ReduceWith(
            x, out, segs, [](T a, T b) { return O::Add(a, b); }, use_pool);
      }
    case ReducerKind::kMultiply:
      return ReduceWith(
          x, out, segs, [](T a, T b) { return O::Mul(a, b); }, use_pool);
    case ReducerKind::kMaximum:
    case ReducerKind::kMinimum: {
      const bool max = kind == ReducerKind::kMaximum;
      auto op_max = [](T a, T b) { return O::Max(a, b); };
      auto op_min = [](T a, T b) { return O::Min(a, b); };
      if constexpr (std::is_same_v<T, float>) {
        auto fold_max = [&](float acc, const float* row, int64_t n) {
          return FoldRowPartials(acc, row, n, op_max);
        };
        auto fold_min = [&](float acc, const float* row, int64_t n) {
          return FoldRowPartials(acc, row, n, op_min);
        };
        return max ? ReduceFast(x.x, x.count, x.type, out, segs, op_max, fold_max, use_pool)
                   : ReduceFast(x.x, x.count, x.type, out, segs, op_min, fold_min, use_pool);
      } else {
        return max ? ReduceWith(x, out, segs, op_max, use_pool)
                   : ReduceWith(x, out, segs, op_min, use_pool);
      }
    }
    case ReducerKind::kAnd:
      if constexpr (std::is_integral_v<T>) {
        return ReduceWith(
            x, out, segs, [](T a, T b) -> T { return a & b; }, use_pool);
      }
      break;
    case ReducerKind::kOr:
      if constexpr (std::is_integral_v<T>) {
        return ReduceWith(
            x, out, segs, [](T a, T b) -> T { return a | b; }, use_pool);
      }
      break;
    case ReducerKind::kXor:
      if constexpr (std::is_integral_v<T>) {
        return ReduceWith(
            x, out, segs, [](T a, T b) -> T { return a ^ b; }, use_pool);
      }
      break;
    default:
      break;
  }
  Fail("no fast reduction for this reducer and type");
}

}  // namespace

float FoldRowF32(ReducerKind kind, float acc, const float* row, int64_t n) {
  using O = Ops<float>;
  const auto fold = [&](auto op) {
    for (int64_t i = 0; i < n; ++i) acc = op(acc, row[i]);
    return acc;
  };
  switch (kind) {
    case ReducerKind::kAdd:
      return acc + SumRow(row, n);
    case ReducerKind::kMultiply:
      return fold([](float a, float b) { return O::Mul(a, b); });
    case ReducerKind::kMaximum:
      return FoldRowPartials(acc, row, n, [](float a, float b) { return O::Max(a, b); });
    case ReducerKind::kMinimum:
      return FoldRowPartials(acc, row, n, [](float a, float b) { return O::Min(a, b); });
    default:
      break;
  }
  Fail("no f32 row fold for this reducer");
}

namespace {

template <typename T>
void FillInit(T* out, int64_t n, T init) {
  std::fill(out, out + n, init);
}

// Any reducer, any number of inputs: the to_apply computation per element.
Value ReduceInterpreted(const HloInstruction& instr, EvalArgs& args) {
  const int64_t n = args.size() / 2;
  const HostTensor& first = args.array(0);
  const std::vector<int64_t>& dims = first.dimensions();
  const std::vector<int64_t>& reduce = instr.dimensions();
  const std::vector<Shape> out_shapes = instr.shape().Leaves();
  const int64_t out_count = out_shapes[0].ElementsCount();
  std::vector<double> acc(static_cast<size_t>(out_count * n));
  for (int64_t i = 0; i < n; ++i) {
    const HostTensor& init = args.array(n + i);
    const double v = LoadAsDouble(init.element_type(), init.raw_data(), 0);
    std::fill(acc.begin() + i * out_count, acc.begin() + (i + 1) * out_count, v);
  }
  ScalarFunction fn(*instr.to_apply());
  // Output strides per input dim (0 for reduced dims).
  std::vector<int64_t> out_stride(dims.size(), 0);
  int64_t stride = 1;
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    if (std::find(reduce.begin(), reduce.end(), d) == reduce.end()) {
      out_stride[d] = stride;
      stride *= dims[d];
    }
  }
  std::vector<int64_t> index(dims.size(), 0);
  std::vector<double> call_args(2 * n), results(n);
  int64_t o = 0;
  for (int64_t e = 0; e < first.element_count(); ++e) {
    for (int64_t i = 0; i < n; ++i) {
      call_args[i] = acc[i * out_count + o];
      const HostTensor& x = args.array(i);
      call_args[n + i] = LoadAsDouble(x.element_type(), x.raw_data(), e);
    }
    fn.Call(call_args, results);
    for (int64_t i = 0; i < n; ++i) acc[i * out_count + o] = results[i];
    for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
      if (++index[d] < dims[d]) {
        o += out_stride[d];
        break;
      }
      o -= out_stride[d] * (dims[d] - 1);
      index[d] = 0;
    }
  }
  Value out;
  for (int64_t i = 0; i < n; ++i) {
    HostTensor t = args.ctx().Allocate(out_shapes[i]);
    for (int64_t k = 0; k < out_count; ++k) {
      StoreDouble(t.element_type(), t.mutable_raw_data(), k, acc[i * out_count + k]);
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

void CheckReduce(const HloInstruction& instr) {
  if (instr.operand_count() == 2 && ClassifyReducer(*instr.to_apply()) != ReducerKind::kOther) {
    return;
  }
  ScalarFunction check(*instr.to_apply());  // throws when it cannot be interpreted
}

Value EvalReduce(const HloInstruction& instr, EvalArgs& args) {
  const ReducerKind kind =
      args.size() == 2 ? ClassifyReducer(*instr.to_apply()) : ReducerKind::kOther;
  const HostTensor& x = args.array(0);
  const PrimitiveType t = x.element_type();
  const bool bitwise =
      kind == ReducerKind::kAnd || kind == ReducerKind::kOr || kind == ReducerKind::kXor;
  if (kind == ReducerKind::kOther || kind == ReducerKind::kReplace ||
      (bitwise && IsFloatingPoint(t))) {
    return ReduceInterpreted(instr, args);
  }
  const std::vector<Seg> segs = Segments(x.dimensions(), instr.dimensions());
  const bool pool = args.ctx().options().use_thread_pool;
  const HostTensor& init = args.array(1);
  HostTensor out = args.ctx().Allocate(instr.shape());
  const int64_t n = out.element_count();
  if (x.element_count() == 0) {  // nothing to fold in: every output is the init value
    for (int64_t i = 0; i < n; ++i) {
      StoreDouble(t, out.mutable_raw_data(), i, LoadAsDouble(t, init.raw_data(), 0));
    }
    return Value{std::move(out)};
  }
  switch (t) {
    case PrimitiveType::kBF16:
    case PrimitiveType::kF16: {
      // Accumulate in f32 (each block of the input widened as it is read),
      // round once at the end.
      std::vector<float> acc(static_cast<size_t>(n),
                             static_cast<float>(LoadAsDouble(t, init.raw_data(), 0)));
      const ReduceInput<uint16_t> in{static_cast<const uint16_t*>(x.raw_data()), x.element_count(),
                                     t};
      ReduceTyped(kind, in, acc.data(), segs, pool);
      ConvertElements(PrimitiveType::kF32, acc.data(), t, out.mutable_raw_data(), n);
      break;
    }
    default:
      DispatchStored(t, [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        T* o = static_cast<T*>(out.mutable_raw_data());
        FillInit(o, n, static_cast<const T*>(init.raw_data())[0]);
        const ReduceInput<T> in{static_cast<const T*>(x.raw_data()), x.element_count(), t};
        ReduceTyped(kind, in, o, segs, pool);
      });
  }
  return Value{std::move(out)};
}

}  // namespace weft::runtime::exec
