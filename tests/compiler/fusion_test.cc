// FuseLoops: random programs of every fusible op run fused and unfused
// through the executor and must give the same bits; named cases check what
// the pass groups (RMSNorm, softmax, SiLU·up, multi-user values, cheap
// duplication); the pass's output round-trips through the printer and the
// parser.
#include "weft/compiler/fusion.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "weft/base/error.h"
#include "weft/hlo/parser.h"
#include "weft/hlo/verifier.h"
#include "weft/runtime/executor.h"

namespace weft::compiler {
namespace {

using runtime::Executor;
using runtime::HostTensor;

// Inputs that are never zero: a random sign times U(0.25, 2) for floats,
// random bits for pred, small non-zero integers.
HostTensor NonZeroInput(const Shape& shape, std::mt19937& rng) {
  std::vector<double> values(static_cast<size_t>(shape.ElementsCount()));
  for (double& v : values) {
    const double sign = (rng() & 1) ? 1.0 : -1.0;
    if (shape.element_type() == PrimitiveType::kPred) {
      v = rng() & 1;
    } else if (IsFloatingPoint(shape.element_type())) {
      v = sign * std::uniform_real_distribution<double>(0.25, 2.0)(rng);
    } else {
      v = sign * std::uniform_int_distribution<int>(1, 9)(rng);
    }
  }
  return HostTensor::FromDoubles(shape, values);
}

std::vector<HostTensor> RandomInputs(const HloModule& module, std::mt19937& rng) {
  std::vector<HostTensor> inputs;
  for (const HloInstruction* p : module.entry_computation()->parameter_instructions()) {
    inputs.push_back(NonZeroInput(p->shape(), rng));
  }
  return inputs;
}

std::vector<HostTensor> Run(const HloModule& module, const std::vector<HostTensor>& inputs) {
  Executor executor(module);
  std::vector<HostTensor> copies;
  for (const HostTensor& t : inputs) copies.push_back(t.Clone());
  return executor.Run(std::move(copies));
}

// Bitwise equality of every output, with the first differing element named.
void ExpectSameBits(const std::vector<HostTensor>& want, const std::vector<HostTensor>& got,
                    const std::string& context) {
  ASSERT_EQ(want.size(), got.size()) << context;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].shape(), got[i].shape()) << "output " << i << "\n" << context;
    if (std::memcmp(want[i].raw_data(), got[i].raw_data(), want[i].byte_size()) == 0) continue;
    const int64_t width = ByteWidth(want[i].element_type());
    for (int64_t k = 0; k < want[i].element_count(); ++k) {
      if (std::memcmp(static_cast<const std::byte*>(want[i].raw_data()) + k * width,
                      static_cast<const std::byte*>(got[i].raw_data()) + k * width, width) != 0) {
        FAIL() << "output " << i << " element " << k << ": unfused " << want[i].GetDouble(k)
               << ", fused " << got[i].GetDouble(k) << "\n"
               << context;
      }
    }
  }
}

std::vector<const HloInstruction*> Fusions(const HloModule& module) {
  std::vector<const HloInstruction*> out;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      if (instr->opcode() == HloOpcode::kFusion) out.push_back(instr);
    }
  }
  return out;
}

// Opcode names of a fused computation's non-parameter instructions, sorted.
std::multiset<std::string> FusedOps(const HloInstruction& fusion) {
  std::multiset<std::string> ops;
  for (const HloInstruction* instr : fusion.called_computations().at(0)->instructions()) {
    if (instr->opcode() != HloOpcode::kParameter) {
      ops.insert(std::string(HloOpcodeString(instr->opcode())));
    }
  }
  return ops;
}

int64_t CountOutsideFusions(const HloModule& module, HloOpcode op) {
  int64_t n = 0;
  for (const HloInstruction* instr : module.entry_computation()->instructions()) {
    n += instr->opcode() == op;
  }
  return n;
}

// Fuses `text`, checks the verifier and the round trip, and compares the
// fused and reparsed runs with the unfused one on fresh inputs (`compare`:
// want, got, context); returns the fused module.
using Comparison = std::function<void(const std::vector<HostTensor>&,
                                      const std::vector<HostTensor>&, const std::string&)>;
std::unique_ptr<HloModule> FuseAndCheck(const std::string& text, std::mt19937& rng,
                                        LoopFusionStats* stats, const Comparison& compare) {
  std::unique_ptr<HloModule> unfused = ParseHloModule(text);
  std::unique_ptr<HloModule> fused = ParseHloModule(text);
  const LoopFusionStats s = FuseLoops(*fused);
  if (stats != nullptr) *stats = s;
  VerifyHloModule(*fused);
  const std::string printed = fused->ToString();
  std::unique_ptr<HloModule> reparsed = ParseHloModule(printed);
  EXPECT_EQ(reparsed->ToString(), printed) << "the fused module does not round-trip";
  const std::vector<HostTensor> inputs = RandomInputs(*unfused, rng);
  const std::vector<HostTensor> want = Run(*unfused, inputs);
  const std::string context = "unfused:\n" + text + "\nfused:\n" + printed;
  compare(want, Run(*fused, inputs), context);
  compare(want, Run(*reparsed, inputs), "(reparsed) " + context);
  return fused;
}

// FuseAndCheck with bitwise equality.
std::unique_ptr<HloModule> FuseAndCompare(const std::string& text, std::mt19937& rng,
                                          LoopFusionStats* stats = nullptr) {
  return FuseAndCheck(text, rng, stats, ExpectSameBits);
}

// ---------------------------------------------------------------------------
// Random programs: DAGs of elementwise ops, broadcasts, compare/select,
// clamp, converts and iota over a random shape, in f32 or bf16, with some
// values also read by a reduce (an unfusible user) and several outputs.

class RandomProgram {
 public:
  // index_maps: also reshape, transpose, slice, concatenate, pad and reverse
  // chains (each returning to the program's shape), with elementwise ops
  // between them.
  RandomProgram(std::mt19937& rng, PrimitiveType main, bool index_maps = false)
      : rng_(rng), main_(TypeName(main)), index_maps_(index_maps) {
    const int rank = Pick(1, 3);
    // Sizes around and past a tile (2048) and a thread-pool chunk (32768).
    const int64_t target = std::vector<int64_t>{7, 300, 2048, 5000, 40000}[Pick(0, 4)];
    int64_t left = target;
    for (int d = 0; d < rank; ++d) {
      const int64_t size =
          d + 1 == rank
              ? std::max<int64_t>(1, left)
              : std::max<int64_t>(1, Pick(1, static_cast<int>(std::min<int64_t>(left, 40))));
      dims_.push_back(size);
      left = std::max<int64_t>(1, left / size);
    }
  }

  std::string Build() {
    const int num_full = Pick(1, 3);
    for (int i = 0; i < num_full; ++i) Param(main_, dims_);
    // Broadcast sources: a random subset of the dimensions.
    const int num_small = Pick(1, 3);
    for (int i = 0; i < num_small; ++i) {
      std::vector<int64_t> picked;
      for (int64_t d = 0; d < Rank(); ++d) {
        if (Pick(0, 1)) picked.push_back(d);
      }
      std::vector<int64_t> sdims;
      for (int64_t d : picked) sdims.push_back(dims_[d]);
      const std::string p = Param(main_, sdims, /*full=*/false);
      smalls_.push_back({p, picked});
    }
    scalar_ = Param(main_, {}, false);
    if (Pick(0, 1)) Param("pred", dims_);
    const int steps = Pick(4, 14);
    for (int i = 0; i < steps; ++i) Step();
    // A reduce over some value gives it an unfusible user too.
    const std::string reduced = Choose(main_);
    const std::string zero = Emit(fmt::format("{}[] constant(0)", main_));
    std::vector<std::string> all_dims;
    for (int64_t d = 0; d < Rank(); ++d) all_dims.push_back(std::to_string(d));
    const std::string sum =
        Emit(fmt::format("{}[] reduce({}, {}), dimensions={{{}}}, to_apply=add_{}", main_, reduced,
                         zero, fmt::join(all_dims, ","), main_));
    uses_[reduced]++;
    // Outputs: every value nobody uses, plus the reduction.
    std::vector<std::string> outs, types;
    for (const Value& v : values_) {
      if (uses_[v.name] == 0 && !v.param) {
        outs.push_back(v.name);
        types.push_back(Shape(v.type));
      }
    }
    outs.push_back(sum);
    types.push_back(fmt::format("{}[]", main_));
    lines_.push_back(
        fmt::format("  ROOT out = ({}) tuple({})", fmt::join(types, ", "), fmt::join(outs, ", ")));
    std::string text = "HloModule random\n\n";
    for (const char* t : {"f32", "bf16"}) {
      text += fmt::format(
          "add_{0} {{\n  a = {0}[] parameter(0)\n  b = {0}[] parameter(1)\n  ROOT s = {0}[] "
          "add(a, b)\n}}\n\n",
          t);
    }
    text += "ENTRY main {\n";
    for (const std::string& line : lines_) text += line + "\n";
    return text + "}\n";
  }

 private:
  struct Value {
    std::string name, type;
    bool param = false;
  };
  struct Small {
    std::string name;
    std::vector<int64_t> dims;  // output dims it maps to
  };

  static std::string TypeName(PrimitiveType t) { return std::string(PrimitiveTypeName(t)); }
  int Pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  int64_t Rank() const { return static_cast<int64_t>(dims_.size()); }
  std::string Shape(const std::string& type) const {
    return fmt::format("{}[{}]", type, fmt::join(dims_, ","));
  }

  std::string Emit(const std::string& rhs) {
    const std::string name = fmt::format("v{}", next_++);
    lines_.push_back(fmt::format("  {} = {}", name, rhs));
    return name;
  }
  std::string Param(const std::string& type, const std::vector<int64_t>& dims, bool full = true) {
    const std::string name = fmt::format("p{}", params_);
    lines_.push_back(
        fmt::format("  {} = {}[{}] parameter({})", name, type, fmt::join(dims, ","), params_++));
    if (full) values_.push_back({name, type, true});
    return name;
  }
  std::string Add(const std::string& type, const std::string& rhs) {
    const std::string name = Emit(fmt::format("{} {}", Shape(type), rhs));
    values_.push_back({name, type, false});
    return name;
  }
  // A full-shape value of `type` (made by a convert or a broadcast when
  // there is none), its use counted.
  std::string Choose(const std::string& type) {
    std::vector<std::string> of_type;
    for (const Value& v : values_) {
      if (v.type == type) of_type.push_back(v.name);
    }
    std::string name;
    if (of_type.empty() || Pick(0, 5) == 0) {
      name = type == main_ || type == "pred" ? Broadcast() : Convert(Choose(main_), type);
      if (type == "pred") name = Compare(name, Choose(main_));
    } else {
      // Prefer recent values: chains, with some fan-out.
      const int k = static_cast<int>(of_type.size());
      name = of_type[std::max(0, k - 1 - std::min(Pick(0, 3), k - 1))];
    }
    uses_[name]++;
    return name;
  }
  std::string Broadcast() {
    if (Pick(0, 3) == 0) {
      const std::string c = Emit(fmt::format(
          "{}[] constant({})", main_, std::vector<std::string>{"0.5", "-1.25", "3"}[Pick(0, 2)]));
      return Add(main_, fmt::format("broadcast({}), dimensions={{}}", c));
    }
    const Small& s = smalls_[Pick(0, static_cast<int>(smalls_.size()) - 1)];
    uses_[s.name]++;
    return Add(main_,
               fmt::format("broadcast({}), dimensions={{{}}}", s.name, fmt::join(s.dims, ",")));
  }
  std::string Convert(const std::string& x, const std::string& type) {
    return Add(type, fmt::format("convert({})", x));
  }
  std::string Compare(const std::string& a, const std::string& b) {
    static const char* kDirs[] = {"LT", "LE", "GT", "GE", "EQ", "NE"};
    return Add("pred", fmt::format("compare({}, {}), direction={}", a, b, kDirs[Pick(0, 5)]));
  }
  void Step() {
    static const char* kUnary[] = {"tanh",        "logistic",
                                   "sine",        "cosine",
                                   "negate",      "abs",
                                   "floor",       "ceil",
                                   "sign",        "exponential",
                                   "sqrt",        "rsqrt",
                                   "log",         "exponential-minus-one",
                                   "log-plus-one"};
    static const char* kBinary[] = {"add",     "subtract", "multiply", "divide",
                                    "maximum", "minimum",  "power",    "remainder"};
    static const char* kIntBinary[] = {"add", "subtract", "multiply", "maximum", "minimum"};
    switch (Pick(0, index_maps_ ? 15 : 9)) {
      case 10:
      case 11:
      case 12:
      case 13:
      case 14:
      case 15:
        IndexMapStep();
        return;
      case 0:
      case 1:
        Add(main_, fmt::format("{}({})", kUnary[Pick(0, 14)], Choose(main_)));
        return;
      case 2:
      case 3:
      case 4: {
        const std::string a = Choose(main_), b = Choose(main_);
        Add(main_, fmt::format("{}({}, {})", kBinary[Pick(0, 7)], a, b));
        return;
      }
      case 5: {
        const std::string p = Choose("pred"), a = Choose(main_), b = Choose(main_);
        Add(main_, fmt::format("select({}, {}, {})", p, a, b));
        return;
      }
      case 6: {
        const bool scalar = Pick(0, 1);
        std::string lo, hi;
        if (scalar) {
          lo = Emit(fmt::format("{}[] constant(-0.75)", main_));
          hi = scalar_;
          uses_[scalar_]++;
        } else {
          lo = Choose(main_);
          hi = Choose(main_);
        }
        const std::string x = Choose(main_);
        Add(main_, fmt::format("clamp({}, {}, {})", lo, x, hi));
        return;
      }
      case 7: {  // through another float type and back
        const std::string other = main_ == "f32" ? "bf16" : "f32";
        Convert(Convert(Choose(main_), other), main_);
        return;
      }
      case 8: {  // integers: iota and converts
        std::string i;
        if (Pick(0, 1)) {
          i = Add("s32",
                  fmt::format("iota(), iota_dimension={}", Pick(0, static_cast<int>(Rank()) - 1)));
        } else {
          i = Convert(Choose(main_), "s32");
        }
        uses_[i]++;
        const std::string j = Choose("s32");
        const std::string k = Add("s32", fmt::format("{}({}, {})", kIntBinary[Pick(0, 4)], i, j));
        uses_[k]++;
        Convert(k, main_);
        return;
      }
      default: {  // pred logic
        const std::string a = Choose("pred"), b = Choose("pred");
        const std::string c = Add(
            "pred", fmt::format("{}({}, {})",
                                std::vector<std::string>{"and", "or", "xor"}[Pick(0, 2)], a, b));
        uses_[c]++;
        const std::string x = Choose(main_), y = Choose(main_);
        Add(main_, fmt::format("select({}, {}, {})", Add("pred", fmt::format("not({})", c)), x, y));
        return;
      }
    }
  }

  std::string Dims(const std::vector<int64_t>& dims) const {
    return fmt::format("{}[{}]", main_, fmt::join(dims, ","));
  }
  // Maybe an elementwise op on an intermediate value of dimensions `dims`.
  std::string MaybeElementwise(const std::string& v, const std::vector<int64_t>& dims) {
    switch (Pick(0, 3)) {
      case 0:
        return Emit(fmt::format("{} negate({})", Dims(dims), v));
      case 1:
        return Emit(fmt::format("{} multiply({}, {})", Dims(dims), v, v));
      default:
        return v;
    }
  }
  void IndexMapStep() {
    const std::string x = Choose(main_);
    const int64_t rank = Rank();
    const int64_t d = Pick(0, static_cast<int>(rank) - 1);
    const int64_t size = dims_[d];
    switch (Pick(0, 5)) {
      case 0: {  // transpose there and back
        std::vector<int64_t> perm(rank), inverse(rank), tdims(rank);
        for (int64_t i = 0; i < rank; ++i) perm[i] = i;
        std::shuffle(perm.begin(), perm.end(), rng_);
        for (int64_t i = 0; i < rank; ++i) {
          inverse[perm[i]] = i;
          tdims[i] = dims_[perm[i]];
        }
        std::string t = Emit(fmt::format("{} transpose({}), dimensions={{{}}}", Dims(tdims), x,
                                         fmt::join(perm, ",")));
        t = MaybeElementwise(t, tdims);
        Add(main_, fmt::format("transpose({}), dimensions={{{}}}", t, fmt::join(inverse, ",")));
        return;
      }
      case 1: {  // reshape flat and back
        int64_t n = 1;
        for (int64_t v : dims_) n *= v;
        std::string r = Emit(fmt::format("{} reshape({})", Dims({n}), x));
        r = MaybeElementwise(r, {n});
        Add(main_, fmt::format("reshape({})", r));
        return;
      }
      case 2: {  // rotate along d: concatenate of two slices
        if (size < 2) break;
        const int64_t k = Pick(1, static_cast<int>(size) - 1);
        auto slice = [&](int64_t lo, int64_t hi) {
          std::vector<int64_t> sdims = dims_;
          sdims[d] = hi - lo;
          std::vector<std::string> ranges;
          for (int64_t i = 0; i < rank; ++i) {
            ranges.push_back(i == d ? fmt::format("[{}:{}]", lo, hi)
                                    : fmt::format("[0:{}]", dims_[i]));
          }
          std::string v = Emit(
              fmt::format("{} slice({}), slice={{{}}}", Dims(sdims), x, fmt::join(ranges, ", ")));
          return MaybeElementwise(v, sdims);
        };
        const std::string a = slice(0, k), b = slice(k, size);
        Add(main_, fmt::format("concatenate({}, {}), dimensions={{{}}}", b, a, d));
        return;
      }
      case 3: {  // every other element along d, padded back with interior padding
        const int64_t m = (size + 1) / 2;
        std::vector<int64_t> sdims = dims_;
        sdims[d] = m;
        std::vector<std::string> ranges, pads;
        for (int64_t i = 0; i < rank; ++i) {
          ranges.push_back(i == d ? fmt::format("[0:{}:2]", size)
                                  : fmt::format("[0:{}]", dims_[i]));
          pads.push_back(i == d ? fmt::format("0_{}_1", size - (2 * m - 1)) : "0_0");
        }
        std::string v = Emit(
            fmt::format("{} slice({}), slice={{{}}}", Dims(sdims), x, fmt::join(ranges, ", ")));
        v = MaybeElementwise(v, sdims);
        const std::string c = Emit(fmt::format("{}[] constant(0.25)", main_));
        Add(main_, fmt::format("pad({}, {}), padding={}", v, c, fmt::join(pads, "x")));
        return;
      }
      case 4: {  // shifted by one along d: a slice padded at the low end
        if (size < 2) break;
        std::vector<int64_t> sdims = dims_;
        sdims[d] = size - 1;
        std::vector<std::string> ranges, pads;
        for (int64_t i = 0; i < rank; ++i) {
          ranges.push_back(i == d ? fmt::format("[1:{}]", size) : fmt::format("[0:{}]", dims_[i]));
          pads.push_back(i == d ? "1_0" : "0_0");
        }
        const std::string v = Emit(
            fmt::format("{} slice({}), slice={{{}}}", Dims(sdims), x, fmt::join(ranges, ", ")));
        uses_[scalar_]++;
        Add(main_, fmt::format("pad({}, {}), padding={}", v, scalar_, fmt::join(pads, "x")));
        return;
      }
      default:
        break;
    }
    // reverse along d (also the fallback)
    Add(main_, fmt::format("reverse({}), dimensions={{{}}}", x, d));
  }

  std::mt19937& rng_;
  std::string main_;
  bool index_maps_ = false;
  std::vector<int64_t> dims_;
  std::vector<std::string> lines_;
  std::vector<Value> values_;
  std::vector<Small> smalls_;
  std::string scalar_;
  std::map<std::string, int> uses_;
  int next_ = 0, params_ = 0;
};

TEST(FuseLoops, RandomProgramsGiveTheUnfusedBits) {
  std::mt19937 rng(20240613);
  int64_t fusions = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const PrimitiveType type = trial % 2 ? PrimitiveType::kBF16 : PrimitiveType::kF32;
    RandomProgram program(rng, type);
    const std::string text = program.Build();
    SCOPED_TRACE(fmt::format("trial {}", trial));
    LoopFusionStats stats;
    FuseAndCompare(text, rng, &stats);
    if (HasFatalFailure() || HasFailure()) return;
    fusions += stats.fusions;
  }
  EXPECT_GT(fusions, 60);  // most programs fuse something
}

TEST(FuseLoops, RandomProgramsWithIndexMapsGiveTheUnfusedBits) {
  std::mt19937 rng(20261125);
  int64_t fusions = 0, index_maps = 0;
  for (int trial = 0; trial < 80; ++trial) {
    const PrimitiveType type = trial % 2 ? PrimitiveType::kBF16 : PrimitiveType::kF32;
    RandomProgram program(rng, type, /*index_maps=*/true);
    const std::string text = program.Build();
    SCOPED_TRACE(fmt::format("trial {}", trial));
    LoopFusionStats stats;
    std::unique_ptr<HloModule> fused = FuseAndCompare(text, rng, &stats);
    if (HasFatalFailure() || HasFailure()) return;
    fusions += stats.fusions;
    for (const HloInstruction* fusion : Fusions(*fused)) {
      for (const std::string& op : FusedOps(*fusion)) {
        if (op == "transpose" || op == "slice" || op == "concatenate" || op == "pad" ||
            op == "reverse" || op == "reshape") {
          ++index_maps;
        }
      }
    }
  }
  EXPECT_GT(fusions, 80);
  EXPECT_GT(index_maps, 80);  // index maps are fused, not left between fusions
}

// ---------------------------------------------------------------------------
// Named cases.

constexpr const char* kAddF32 = R"(
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
)";

TEST(FuseLoops, RmsNorm) {
  std::mt19937 rng(1);
  const std::string text = std::string("HloModule rmsnorm\n") + kAddF32 + R"(
ENTRY main {
  x = f32[8,512] parameter(0)
  w = f32[512] parameter(1)
  sq = f32[8,512] multiply(x, x)
  zero = f32[] constant(0)
  ss = f32[8] reduce(sq, zero), dimensions={1}, to_apply=add
  inv_n = f32[] constant(0.001953125)
  inv_nb = f32[8] broadcast(inv_n), dimensions={}
  mean = f32[8] multiply(ss, inv_nb)
  eps = f32[] constant(1e-05)
  epsb = f32[8] broadcast(eps), dimensions={}
  me = f32[8] add(mean, epsb)
  r = f32[8] rsqrt(me)
  rb = f32[8,512] broadcast(r), dimensions={0}
  xr = f32[8,512] multiply(x, rb)
  wb = f32[8,512] broadcast(w), dimensions={1}
  ROOT y = f32[8,512] multiply(xr, wb)
})";
  std::unique_ptr<HloModule> fused = FuseAndCompare(text, rng);
  const HloInstruction* root = fused->entry_computation()->root_instruction();
  ASSERT_EQ(root->opcode(), HloOpcode::kFusion);
  EXPECT_EQ(root->name(), "fusion") << fused->ToString();
  EXPECT_EQ(root->attrs().fusion_kind, FusionKind::kLoop);
  EXPECT_EQ(FusedOps(*root),
            (std::multiset<std::string>{"broadcast", "broadcast", "multiply", "multiply"}));
  EXPECT_EQ(root->called_computations()[0]->root_instruction()->name(), "y");
  // The statistics chain: mean, eps, rsqrt in one [8] fusion, which reads
  // the sum of squares from an input fusion: x*x (its one user is the
  // reduce) and the reduce with its zero.
  const HloInstruction* rs = nullptr;
  for (const HloInstruction* operand : root->operands()) {
    if (operand->opcode() == HloOpcode::kFusion) rs = operand;
  }
  ASSERT_NE(rs, nullptr) << fused->ToString();
  EXPECT_EQ(rs->attrs().fusion_kind, FusionKind::kLoop);
  EXPECT_EQ(FusedOps(*rs), (std::multiset<std::string>{"broadcast", "broadcast", "constant",
                                                       "constant", "multiply", "add", "rsqrt"}));
  ASSERT_EQ(rs->operand_count(), 1);
  const HloInstruction* ss = rs->operand(0);
  ASSERT_EQ(ss->opcode(), HloOpcode::kFusion) << fused->ToString();
  EXPECT_EQ(ss->attrs().fusion_kind, FusionKind::kInput);
  EXPECT_EQ(FusedOps(*ss), (std::multiset<std::string>{"multiply", "constant", "reduce"}));
  EXPECT_EQ(ss->called_computations()[0]->root_instruction()->name(), "ss");
  EXPECT_EQ(fused->entry_computation()->GetInstruction("sq"), nullptr);
  EXPECT_EQ(CountOutsideFusions(*fused, HloOpcode::kReduce), 0);
}

TEST(FuseLoops, Softmax) {
  std::mt19937 rng(2);
  const std::string text = std::string("HloModule softmax\n") + kAddF32 + R"(
ENTRY main {
  x = f32[16,300] parameter(0)
  ninf = f32[] constant(-inf)
  m = f32[16] reduce(x, ninf), dimensions={1}, to_apply=max
  mb = f32[16,300] broadcast(m), dimensions={0}
  d = f32[16,300] subtract(x, mb)
  e = f32[16,300] exponential(d)
  zero = f32[] constant(0)
  s = f32[16] reduce(e, zero), dimensions={1}, to_apply=add
  sb = f32[16,300] broadcast(s), dimensions={0}
  ROOT p = f32[16,300] divide(e, sb)
})";
  std::unique_ptr<HloModule> fused = FuseAndCompare(text, rng);
  // e = exp(x - broadcast(max)) has two readers, the sum's input fusion and
  // the divide's fusion: recomputed in both, never materialized.
  std::vector<std::multiset<std::string>> ops;
  for (const HloInstruction* f : Fusions(*fused)) ops.push_back(FusedOps(*f));
  EXPECT_EQ(ops.size(), 2u) << fused->ToString();
  EXPECT_NE(std::find(ops.begin(), ops.end(),
                      std::multiset<std::string>{"broadcast", "subtract", "exponential", "constant",
                                                 "reduce"}),
            ops.end())
      << fused->ToString();
  EXPECT_NE(std::find(ops.begin(), ops.end(),
                      std::multiset<std::string>{"broadcast", "subtract", "exponential",
                                                 "broadcast", "divide"}),
            ops.end())
      << fused->ToString();
  EXPECT_EQ(CountOutsideFusions(*fused, HloOpcode::kExp), 0);
  // The [16, 300] values between fusions: x and the result.
  int64_t full = 0;
  for (const HloInstruction* instr : fused->entry_computation()->instructions()) {
    full += instr->shape().IsArray() && instr->shape().ElementsCount() == 16 * 300;
  }
  EXPECT_EQ(full, 2) << fused->ToString();
}

// Input fusion on random rows: an elementwise chain of the input (and a
// broadcast row) reduced over the innermost dims by add, multiply, max or
// min, with rows shorter than a SIMD width, rows spanning several tiles, and
// a reduction of everything to a scalar; the init is a parameter or a
// constant. Every case forms one kInput fusion and gives the unfused bits.
TEST(FuseLoops, InputFusionsOfRandomRowsGiveTheUnfusedBits) {
  std::mt19937 rng(11);
  const char* kReducers[] = {"add", "mul", "max", "min"};
  const char* kRoots[] = {"add", "multiply", "maximum", "minimum"};
  int input_fusions = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int r = static_cast<int>(rng() % 4);
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 5);
    const int64_t mid = 1 + static_cast<int64_t>(rng() % 3);
    int64_t inner = std::vector<int64_t>{1, 3, 7, 16, 300, 2049, 5000}[rng() % 7];
    if (rows * mid * inner == 1) inner = 3;  // one element: nothing to fold
    // Reduce the last dim, the last two, or everything.
    const int mode = static_cast<int>(rng() % 3);
    const std::string x = fmt::format("f32[{},{},{}]", rows, mid, inner);
    const std::string dims = mode == 0 ? "2" : mode == 1 ? "1,2" : "0,1,2";
    const std::string out = mode == 0   ? fmt::format("f32[{},{}]", rows, mid)
                            : mode == 1 ? fmt::format("f32[{}]", rows)
                                        : "f32[]";
    const bool init_param = rng() % 2 == 0;
    // Multiplying thousands of values overflows or vanishes: keep products short.
    const std::string scale = kReducers[r] == std::string("mul") ? "0.999" : "1.5";
    const std::string text = fmt::format(R"(HloModule input_{0}
{1} {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] {2}(a, b)
}}
ENTRY main {{
  x = {3} parameter(0)
  w = f32[{4}] parameter(1)
  i = f32[] parameter(2)
  wb = {3} broadcast(w), dimensions={{2}}
  k = f32[] constant({5})
  kb = {3} broadcast(k), dimensions={{}}
  t = {3} tanh(x)
  m = {3} multiply(t, kb)
  v = {3} add(m, wb)
  init = f32[] {6}
  ROOT s = {7} reduce(v, init), dimensions={{{8}}}, to_apply={1}
}})",
                                         trial, kReducers[r], kRoots[r], x, inner, scale,
                                         init_param ? "add(i, i)" : "constant(0.5)", out, dims);
    SCOPED_TRACE(text);
    LoopFusionStats stats;
    std::unique_ptr<HloModule> fused = FuseAndCompare(text, rng, &stats);
    EXPECT_EQ(stats.input_fusions, 1) << fused->ToString();
    EXPECT_EQ(CountOutsideFusions(*fused, HloOpcode::kReduce), 0) << fused->ToString();
    input_fusions += static_cast<int>(stats.input_fusions);
  }
  EXPECT_EQ(input_fusions, 40);
}

// What stays a plain reduce: its input read elsewhere too (an output),
// outer dims reduced, a bf16 reduce, rows longer than kMaxInputFusionRow.
TEST(FuseLoops, InputFusionOnlyForInnermostF32RowsReadByTheReduceAlone) {
  std::mt19937 rng(12);
  const std::string text = std::string("HloModule not_input\n") + kAddF32 + R"(
addbf {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}
ENTRY main {
  x = f32[4,300] parameter(0)
  y = bf16[4,300] parameter(1)
  z = f32[1,270000] parameter(2)
  e = f32[4,300] exponential(x)
  zero = f32[] constant(0)
  outer = f32[300] reduce(e, zero), dimensions={0}, to_apply=add
  n = f32[4,300] negate(x)
  inner = f32[4] reduce(n, zero), dimensions={1}, to_apply=add
  yn = bf16[4,300] negate(y)
  bzero = bf16[] constant(0)
  badd = bf16[4] reduce(yn, bzero), dimensions={1}, to_apply=addbf
  zn = f32[1,270000] negate(z)
  long = f32[1] reduce(zn, zero), dimensions={1}, to_apply=add
  ROOT t = (f32[300], f32[4], bf16[4], f32[1], f32[4,300]) tuple(outer, inner, badd, long, n)
})";
  static_assert(270000 > kMaxInputFusionRow);
  LoopFusionStats stats;
  std::unique_ptr<HloModule> fused = FuseAndCompare(text, rng, &stats);
  // inner's input n is also an output: nothing fuses into that reduce.
  EXPECT_EQ(stats.input_fusions, 0) << fused->ToString();
  EXPECT_EQ(CountOutsideFusions(*fused, HloOpcode::kReduce), 4) << fused->ToString();
}

TEST(FuseLoops, SiluTimesUpInBf16) {
  std::mt19937 rng(3);
  const std::string text = R"(HloModule silu
ENTRY main {
  gate = bf16[32,384] parameter(0)
  up = bf16[32,384] parameter(1)
  sg = bf16[32,384] logistic(gate)
  silu = bf16[32,384] multiply(gate, sg)
  h = bf16[32,384] multiply(silu, up)
  ROOT hf = f32[32,384] convert(h)
})";
  std::unique_ptr<HloModule> fused = FuseAndCompare(text, rng);
  const std::vector<const HloInstruction*> fusions = Fusions(*fused);
  ASSERT_EQ(fusions.size(), 1u) << fused->ToString();
  EXPECT_EQ(FusedOps(*fusions[0]),
            (std::multiset<std::string>{"logistic", "multiply", "multiply", "convert"}));
  // gate is read twice inside, passed once.
  EXPECT_EQ(fusions[0]->operand_count(), 2);
}

TEST(FuseLoops, AValueWithTwoUsersIsNotDuplicatedUnlessCheap) {
  std::mt19937 rng(4);
  const std::string text = R"(HloModule users
ENTRY main {
  x = f32[64,96] parameter(0)
  w = f32[96,32] parameter(1)
  b = f32[96] parameter(2)
  bb = f32[64,96] broadcast(b), dimensions={1}
  a = f32[64,96] add(x, bb)
  e = f32[64,96] exponential(a)
  one = f32[] constant(1)
  ones = f32[64,96] broadcast(one), dimensions={}
  t = f32[64,96] add(e, ones)
  d = f32[64,32] dot(e, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  n = f32[64,96] negate(x)
  u = f32[64,96] multiply(n, bb)
  ROOT out = (f32[64,96], f32[64,32], f32[64,96]) tuple(t, d, u)
})";
  LoopFusionStats stats;
  std::unique_ptr<HloModule> fused = FuseAndCompare(text, rng, &stats);
  // e feeds the dot and t: computed once, as the root of the fusion that
  // also holds a = x + bb, never copied into t's fusion.
  int64_t exps = 0;
  for (const HloInstruction* f : Fusions(*fused)) {
    for (const HloInstruction* i : f->called_computations()[0]->instructions()) {
      exps += i->opcode() == HloOpcode::kExp;
    }
  }
  EXPECT_EQ(exps, 1) << fused->ToString();
  const HloInstruction* root = fused->entry_computation()->root_instruction();
  const HloInstruction* t = root->operand(0);
  ASSERT_EQ(t->opcode(), HloOpcode::kFusion);
  EXPECT_EQ(FusedOps(*t), (std::multiset<std::string>{"add", "broadcast", "constant"}));
  EXPECT_EQ(root->operand(1)->operand(0), t->operand(0));  // the dot reads the same e
  // The broadcast bb has users in two fusions: copied into both, the
  // original is gone.
  EXPECT_EQ(CountOutsideFusions(*fused, HloOpcode::kBroadcast), 0) << fused->ToString();
  EXPECT_EQ(stats.duplicated, 1);
}

// A one-hot compare(iota, broadcast(targets)), its convert, a select of it
// and a convert of a parameter are cheap: copied into every fusion that
// reads them (an input fusion, loop fusions, a fusion feeding a dot), so no
// pred or converted value is materialized; the same bits as unfused.
TEST(FuseLoops, CheapElementwiseOpsOfCheapOperandsAreCopiedIntoEachFusion) {
  std::mt19937 rng(21);
  const std::string text = std::string("HloModule onehot\n") + kAddF32 + R"(
ENTRY main {
  x = f32[6,300] parameter(0)
  t = s32[6] parameter(1)
  g = f32[6] parameter(2)
  xb = bf16[6,300] parameter(3)
  w = f32[300,4] parameter(4)
  io = s32[6,300] iota(), iota_dimension=1
  tb = s32[6,300] broadcast(t), dimensions={0}
  hot = pred[6,300] compare(io, tb), direction=EQ
  zero = f32[] constant(0)
  zb = f32[6,300] broadcast(zero), dimensions={}
  sel = f32[6,300] select(hot, x, zb)
  tl = f32[6] reduce(sel, zero), dimensions={1}, to_apply=add
  gb = f32[6,300] broadcast(g), dimensions={0}
  dsel = f32[6,300] select(hot, gb, zb)
  hotf = f32[6,300] convert(hot)
  xf = f32[6,300] convert(xb)
  a = f32[6,300] multiply(xf, dsel)
  b = f32[6,300] add(a, hotf)
  n = f32[6,300] negate(xf)
  dd = f32[6,4] dot(hotf, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT out = (f32[6], f32[6,300], f32[6,300], f32[6,4]) tuple(tl, b, n, dd)
})";
  LoopFusionStats stats;
  std::unique_ptr<HloModule> fused = FuseAndCompare(text, rng, &stats);
  // Nothing of the one-hot or the converts stays between fusions: the dot
  // reads a fusion computing convert(compare(iota, broadcast(t))).
  for (HloOpcode op : {HloOpcode::kCompare, HloOpcode::kConvert, HloOpcode::kSelect,
                       HloOpcode::kIota, HloOpcode::kBroadcast}) {
    EXPECT_EQ(CountOutsideFusions(*fused, op), 0) << HloOpcodeString(op) << "\n"
                                                  << fused->ToString();
  }
  for (const HloInstruction* instr : fused->entry_computation()->instructions()) {
    EXPECT_NE(instr->shape().element_type(), PrimitiveType::kPred) << instr->Describe();
  }
  // tl's input fusion, b's, n's and the dot operand's: the compare is in
  // three of them (not n's), xf in two.
  int64_t compares = 0, converts = 0, inputs = 0;
  for (const HloInstruction* f : Fusions(*fused)) {
    const std::multiset<std::string> ops = FusedOps(*f);
    compares += static_cast<int64_t>(ops.count("compare"));
    converts += static_cast<int64_t>(ops.count("convert"));
    inputs += f->attrs().fusion_kind == FusionKind::kInput;
  }
  EXPECT_EQ(Fusions(*fused).size(), 4u) << fused->ToString();
  EXPECT_EQ(inputs, 1);
  EXPECT_EQ(compares, 3) << fused->ToString();
  EXPECT_EQ(converts, 4) << fused->ToString();  // hotf twice (b, the dot's), xf twice
  const HloInstruction* dot = fused->entry_computation()->root_instruction()->operand(3);
  ASSERT_EQ(dot->opcode(), HloOpcode::kDot);
  EXPECT_EQ(dot->operand(0)->opcode(), HloOpcode::kFusion);
}

// A compare that is also an output: where it is cheap (of a parameter) it
// is copied into its fusion reader as well; of an exp (not cheap) it is
// computed once, in a fusion of its own, and read from there.
TEST(FuseLoops, ElementwiseOfNonCheapOperandsIsNotCheap) {
  for (const char* operand : {"x", "e"}) {
    std::mt19937 rng(22);
    const std::string text = fmt::format(R"(HloModule notcheap
ENTRY main {{
  x = f32[64,96] parameter(0)
  e = f32[64,96] exponential(x)
  one = f32[] constant(1)
  ones = f32[64,96] broadcast(one), dimensions={{}}
  big = pred[64,96] compare({}, ones), direction=GT
  n = f32[64,96] select(big, x, ones)
  ROOT out = (pred[64,96], f32[64,96]) tuple(big, n)
}})",
                                         operand);
    SCOPED_TRACE(operand);
    std::unique_ptr<HloModule> fused = FuseAndCompare(text, rng);
    int64_t compares = CountOutsideFusions(*fused, HloOpcode::kCompare);
    for (const HloInstruction* f : Fusions(*fused)) {
      compares += static_cast<int64_t>(FusedOps(*f).count("compare"));
    }
    EXPECT_EQ(compares, operand == std::string("x") ? 2 : 1) << fused->ToString();
  }
}

// The cross-entropy and its gradient as the training step computes them
// (the max stopped: models/llama.cc): rows longer than 2^16, the sum and the
// target logit as input fusions, the one-hot copied into the target logit's
// and the gradient's fusions, exp(x - max) recomputed in the sum's and the
// gradient's: of the [N, V] values only the logits and their gradient are
// materialized. The same bits as unfused.
TEST(FuseLoops, CrossEntropyHoldsOnlyTheLogitsAndTheirGradient) {
  std::mt19937 rng(23);
  const std::string text = std::string("HloModule xent\n") + kAddF32 + R"(
ENTRY main {
  x = f32[3,70000] parameter(0)
  t = s32[3] parameter(1)
  dl = f32[3] parameter(2)
  ninf = f32[] constant(-inf)
  m = f32[3] reduce(x, ninf), dimensions={1}, to_apply=max
  mb = f32[3,70000] broadcast(m), dimensions={0}
  d = f32[3,70000] subtract(x, mb)
  e = f32[3,70000] exponential(d)
  zero = f32[] constant(0)
  s = f32[3] reduce(e, zero), dimensions={1}, to_apply=add
  io = s32[3,70000] iota(), iota_dimension=1
  tb = s32[3,70000] broadcast(t), dimensions={0}
  hot = pred[3,70000] compare(io, tb), direction=EQ
  zb = f32[3,70000] broadcast(zero), dimensions={}
  sel = f32[3,70000] select(hot, x, zb)
  tl = f32[3] reduce(sel, zero), dimensions={1}, to_apply=add
  ls = f32[3] log(s)
  lse = f32[3] add(ls, m)
  nll = f32[3] subtract(lse, tl)
  ds = f32[3] divide(dl, s)
  dsb = f32[3,70000] broadcast(ds), dimensions={0}
  ge = f32[3,70000] multiply(dsb, e)
  ndl = f32[3] negate(dl)
  ndlb = f32[3,70000] broadcast(ndl), dimensions={0}
  gt = f32[3,70000] select(hot, ndlb, zb)
  g = f32[3,70000] add(ge, gt)
  ROOT out = (f32[3], f32[3,70000]) tuple(nll, g)
})";
  LoopFusionStats stats;
  std::unique_ptr<HloModule> fused = FuseAndCompare(text, rng, &stats);
  std::vector<std::string> full;  // [3, 70000] values between fusions
  for (const HloInstruction* instr : fused->entry_computation()->instructions()) {
    if (instr->shape().IsArray() && instr->shape().ElementsCount() == 3 * 70000) {
      full.push_back(std::string(HloOpcodeString(instr->opcode())));
    }
  }
  EXPECT_EQ(full, (std::vector<std::string>{"parameter", "fusion"})) << fused->ToString();
  EXPECT_EQ(stats.input_fusions, 2) << fused->ToString();
  EXPECT_EQ(CountOutsideFusions(*fused, HloOpcode::kReduce), 1);  // the max
  int64_t exps = 0, compares = 0;
  for (const HloInstruction* f : Fusions(*fused)) {
    exps += static_cast<int64_t>(FusedOps(*f).count("exponential"));
    compares += static_cast<int64_t>(FusedOps(*f).count("compare"));
  }
  EXPECT_EQ(exps, 2) << fused->ToString();
  EXPECT_EQ(compares, 2) << fused->ToString();
}

// Recomputation only where it saves a reduce's operand, and only where
// every reader can compute it: exp(x) read by a reduce's input fusion and
// through a transpose (where only index maps are computed), or by two loop
// fusions, is computed once.
TEST(FuseLoops, RecomputesOnlyAReducesOperandWhereEveryReaderCanComputeIt) {
  const char* kReaders[] = {
      R"(  tr = f32[96,64] transpose(e), dimensions={1,0}
  n = f32[96,64] negate(tr)
  zero = f32[] constant(0)
  s = f32[64] reduce(e, zero), dimensions={1}, to_apply=add
  ROOT out = (f32[64], f32[96,64]) tuple(s, n))",
      R"(  a = f32[64,96] add(e, bb)
  n = f32[64,96] negate(e)
  ROOT out = (f32[64,96], f32[64,96]) tuple(a, n))"};
  for (const char* readers : kReaders) {
    std::mt19937 rng(24);
    const std::string text = std::string("HloModule once\n") + kAddF32 + R"(
ENTRY main {
  x = f32[64,96] parameter(0)
  b = f32[96] parameter(1)
  bb = f32[64,96] broadcast(b), dimensions={1}
  xb = f32[64,96] add(x, bb)
  e = f32[64,96] exponential(xb)
)" + readers + "\n}";
    SCOPED_TRACE(text);
    std::unique_ptr<HloModule> fused = FuseAndCompare(text, rng);
    int64_t exps = CountOutsideFusions(*fused, HloOpcode::kExp);
    for (const HloInstruction* f : Fusions(*fused)) {
      exps += static_cast<int64_t>(FusedOps(*f).count("exponential"));
    }
    EXPECT_EQ(exps, 1) << fused->ToString();
  }
}

TEST(FuseLoops, LeavesReducersCollectivesAndLoneOpsAlone) {
  const std::string text = std::string("HloModule m\n") + kAddF32 + R"(
ENTRY main {
  x = f32[16] parameter(0)
  n = f32[16] negate(x)
  r = f32[16] all-reduce(n), replica_groups={}, to_apply=add
  ROOT s = f32[16] abs(r)
})";
  std::unique_ptr<HloModule> module = ParseHloModule(text);
  const LoopFusionStats stats = FuseLoops(*module);
  EXPECT_EQ(stats.fusions, 0);
  EXPECT_EQ(module->GetComputation("add")->root_instruction()->opcode(), HloOpcode::kAdd);
  EXPECT_EQ(module->entry_computation()->instruction_count(), 4);
}

TEST(FuseLoops, FusesInsideWhileBodies) {
  std::mt19937 rng(5);
  const std::string text = R"(HloModule loop
cond {
  s = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  k = s32[] constant(3)
  ROOT lt = pred[] compare(i, k), direction=LT
}
body {
  s = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[64] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  h = f32[] constant(0.5)
  hb = f32[64] broadcast(h), dimensions={}
  y = f32[64] multiply(x, hb)
  z = f32[64] tanh(y)
  ROOT t = (s32[], f32[64]) tuple(j, z)
}
ENTRY main {
  x = f32[64] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[64]) tuple(zero, x)
  w = (s32[], f32[64]) while(init), condition=cond, body=body
  ROOT r = f32[64] get-tuple-element(w), index=1
})";
  LoopFusionStats stats;
  std::unique_ptr<HloModule> fused = FuseAndCompare(text, rng, &stats);
  EXPECT_EQ(stats.fusions, 1) << fused->ToString();
  EXPECT_EQ(fused->GetComputation("body")->GetInstruction("z"), nullptr);
}

// ---------------------------------------------------------------------------
// Output fusion (kOutput): a dot and its add / multiply chain.

// The largest |fused - unfused| / |unfused| over every element of every
// output (0 when the bits agree).
struct Closeness {
  double max_relative = 0;
  bool bitwise = true;
};
void Compare(const std::vector<HostTensor>& want, const std::vector<HostTensor>& got, Closeness& c,
             const std::string& context) {
  ASSERT_EQ(want.size(), got.size()) << context;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].shape(), got[i].shape()) << context;
    if (std::memcmp(want[i].raw_data(), got[i].raw_data(), want[i].byte_size()) != 0) {
      c.bitwise = false;
    }
    for (int64_t k = 0; k < want[i].element_count(); ++k) {
      const double w = want[i].GetDouble(k), g = got[i].GetDouble(k);
      const double rel = w == g ? 0 : std::abs(w - g) / std::abs(w);
      c.max_relative = std::max(c.max_relative, rel);
      if (!(rel <= 1e-6)) {
        FAIL() << "output " << i << " element " << k << ": unfused " << w << ", fused " << g << "\n"
               << context;
      }
    }
  }
}

// FuseAndCheck within 1e-6 relative per element (the fused dot may run a
// different oneDNN kernel): verifier, round trip, fused and reparsed runs.
std::unique_ptr<HloModule> FuseAndCompareClose(const std::string& text, std::mt19937& rng,
                                               LoopFusionStats& stats, Closeness& closeness) {
  return FuseAndCheck(text, rng, &stats,
                      [&](const std::vector<HostTensor>& want, const std::vector<HostTensor>& got,
                          const std::string& context) { Compare(want, got, closeness, context); });
}

std::string DimsText(const std::vector<int64_t>& dims) {
  return fmt::format("f32[{}]", fmt::join(dims, ","));
}

// Random dots: a batch dim or none, one or two free dims per side, one or
// two contracting dims, each operand's dims in a random order (transposed
// and permuted operands), followed by a chain of 1-3 add / multiply steps
// with random other operands (parameters, or an elementwise value) in
// either operand order. Each forms exactly one kOutput fusion, within 1e-6
// relative of the unfused program.
TEST(FuseOutputs, RandomDotsWithAddMultiplyChainsMatchUnfused) {
  std::mt19937 rng(13);
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  Closeness closeness;
  int64_t output_fusions = 0, steps_total = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int nb = pick(0, 1), nm = pick(1, 2), nn = pick(1, 2), nk = pick(1, 2);
    std::vector<int64_t> b, m, n, k;
    for (int i = 0; i < nb; ++i) b.push_back(pick(1, 3));
    for (int i = 0; i < nm; ++i) m.push_back(pick(1, nm == 1 ? 40 : 7));
    for (int i = 0; i < nn; ++i) n.push_back(pick(1, nn == 1 ? 40 : 7));
    for (int i = 0; i < nk; ++i) k.push_back(pick(1, nk == 1 ? 50 : 8));
    // Logical lhs dims: batch, m, k; rhs: batch, k, n; each permuted.
    std::vector<int64_t> lhs_logical, rhs_logical;
    for (int64_t v : b) lhs_logical.push_back(v);
    for (int64_t v : m) lhs_logical.push_back(v);
    for (int64_t v : k) lhs_logical.push_back(v);
    for (int64_t v : b) rhs_logical.push_back(v);
    for (int64_t v : k) rhs_logical.push_back(v);
    for (int64_t v : n) rhs_logical.push_back(v);
    auto permutation = [&](size_t size) {
      std::vector<int64_t> p(size);
      for (size_t i = 0; i < size; ++i) p[i] = static_cast<int64_t>(i);
      if (rng() % 2) std::shuffle(p.begin(), p.end(), rng);  // half stay in order
      return p;
    };
    // where[logical] = the operand dim holding it.
    const std::vector<int64_t> lp = permutation(lhs_logical.size());
    const std::vector<int64_t> rp = permutation(rhs_logical.size());
    std::vector<int64_t> lhs_dims(lp.size()), rhs_dims(rp.size());
    for (size_t i = 0; i < lp.size(); ++i) lhs_dims[lp[i]] = lhs_logical[i];
    for (size_t i = 0; i < rp.size(); ++i) rhs_dims[rp[i]] = rhs_logical[i];
    std::vector<int64_t> lb, lc, rb, rc;
    for (int i = 0; i < nb; ++i) {
      lb.push_back(lp[i]);
      rb.push_back(rp[i]);
    }
    for (int i = 0; i < nk; ++i) {
      lc.push_back(lp[nb + nm + i]);
      rc.push_back(rp[nb + i]);
    }
    // XLA's dot result: batch dims, then each operand's free dims in its
    // own dimension order.
    std::vector<int64_t> out_dims = b;
    for (int64_t d = 0; d < static_cast<int64_t>(lhs_dims.size()); ++d) {
      if (std::find(lb.begin(), lb.end(), d) == lb.end() &&
          std::find(lc.begin(), lc.end(), d) == lc.end()) {
        out_dims.push_back(lhs_dims[d]);
      }
    }
    for (int64_t d = 0; d < static_cast<int64_t>(rhs_dims.size()); ++d) {
      if (std::find(rb.begin(), rb.end(), d) == rb.end() &&
          std::find(rc.begin(), rc.end(), d) == rc.end()) {
        out_dims.push_back(rhs_dims[d]);
      }
    }
    const std::string out = DimsText(out_dims);
    std::string text = fmt::format("HloModule output_{}\nENTRY main {{\n", trial);
    text += fmt::format("  lhs = {} parameter(0)\n  rhs = {} parameter(1)\n", DimsText(lhs_dims),
                        DimsText(rhs_dims));
    std::string dn = fmt::format("lhs_contracting_dims={{{}}}, rhs_contracting_dims={{{}}}",
                                 fmt::join(lc, ","), fmt::join(rc, ","));
    if (nb > 0) {
      dn = fmt::format("lhs_batch_dims={{{}}}, rhs_batch_dims={{{}}}, ", fmt::join(lb, ","),
                       fmt::join(rb, ",")) +
           dn;
    }
    text += fmt::format("  d = {} dot(lhs, rhs), {}\n", out, dn);
    const int steps = pick(1, 3);
    std::string prev = "d";
    for (int s = 0; s < steps; ++s) {
      const int param = 2 + s;
      std::string other = fmt::format("o{}", s);
      text += fmt::format("  {} = {} parameter({})\n", other, out, param);
      if (rng() % 3 == 0) {
        // An elementwise value (SiLU of it): a loop fusion feeding the step.
        text += fmt::format("  lg{0} = {1} logistic(o{0})\n  si{0} = {1} multiply(o{0}, lg{0})\n",
                            s, out);
        other = fmt::format("si{}", s);
      }
      const char* op = rng() % 2 ? "add" : "multiply";
      const std::string name = fmt::format("s{}", s);
      if (rng() % 2) {
        text += fmt::format("  {} = {} {}({}, {})\n", name, out, op, prev, other);
      } else {
        text += fmt::format("  {} = {} {}({}, {})\n", name, out, op, other, prev);
      }
      prev = name;
    }
    text += fmt::format("  ROOT r = {} negate({})\n}}\n", out, prev);
    SCOPED_TRACE(text);
    LoopFusionStats stats;
    std::unique_ptr<HloModule> fused = FuseAndCompareClose(text, rng, stats, closeness);
    if (HasFatalFailure() || HasFailure()) return;
    EXPECT_EQ(stats.output_fusions, 1) << fused->ToString();
    EXPECT_EQ(CountOutsideFusions(*fused, HloOpcode::kDot), 0) << fused->ToString();
    for (const HloInstruction* f : Fusions(*fused)) {
      if (f->attrs().fusion_kind != FusionKind::kOutput) continue;
      std::multiset<std::string> ops = FusedOps(*f);
      EXPECT_EQ(ops.count("dot"), 1u);
      EXPECT_EQ(static_cast<int>(ops.size()), 1 + steps) << fused->ToString();
      EXPECT_EQ(f->operand_count(), 2 + steps);
      EXPECT_NE(
          fused->ToString().find("kind=kOutput, calls=" + f->called_computations()[0]->name()),
          std::string::npos);
    }
    output_fusions += stats.output_fusions;
    steps_total += steps;
  }
  EXPECT_EQ(output_fusions, 40);
  std::printf("output fusion: max relative difference fused vs unfused %.3g, %s\n",
              closeness.max_relative, closeness.bitwise ? "bitwise equal" : "not bitwise equal");
}

// What stays unfused: a dot with a second user, an add of a broadcast
// (smaller) bias, a bf16 dot, multiply(d, d); a chain stops at a value with
// two users.
TEST(FuseOutputs, OnlyFullShapeChainsOfSingleUserF32Dots) {
  std::mt19937 rng(14);
  const std::string text = R"(HloModule not_output
ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,12] parameter(1)
  y = f32[8,12] parameter(2)
  bias = f32[12] parameter(3)
  xb = bf16[8,16] parameter(4)
  wb = bf16[16,12] parameter(5)
  yb = bf16[8,12] parameter(6)
  d1 = f32[8,12] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a1 = f32[8,12] add(d1, y)
  d2 = f32[8,12] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[8,12] broadcast(bias), dimensions={1}
  a2 = f32[8,12] add(d2, bb)
  d3 = bf16[8,12] dot(xb, wb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a3 = bf16[8,12] add(d3, yb)
  d4 = f32[8,12] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a4 = f32[8,12] multiply(d4, d4)
  d5 = f32[8,12] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a5 = f32[8,12] add(y, d5)
  m5 = f32[8,12] multiply(a5, y)
  ROOT t = (f32[8,12], f32[8,12], f32[8,12], bf16[8,12], f32[8,12], f32[8,12], f32[8,12]) tuple(d1, a1, a2, a3, a4, a5, m5)
})";
  Closeness closeness;
  LoopFusionStats stats;
  std::unique_ptr<HloModule> fused = FuseAndCompareClose(text, rng, stats, closeness);
  // Only d5 + y (a5 has two users: the chain stops there).
  EXPECT_EQ(stats.output_fusions, 1) << fused->ToString();
  EXPECT_EQ(CountOutsideFusions(*fused, HloOpcode::kDot), 4) << fused->ToString();
  for (const HloInstruction* f : Fusions(*fused)) {
    if (f->attrs().fusion_kind == FusionKind::kOutput) {
      EXPECT_EQ(FusedOps(*f), (std::multiset<std::string>{"dot", "add"}));
      EXPECT_EQ(f->called_computations()[0]->root_instruction()->name(), "a5");
    }
  }
}

// The Llama MLP: the up projection's dot fuses with multiply(silu(gate),
// up) (other operand first) and the down projection's with the residual
// add; the gate dot (two users) stays, SiLU is a loop fusion.
TEST(FuseOutputs, SiluTimesUpAndResidualAdd) {
  std::mt19937 rng(15);
  const std::string text = R"(HloModule mlp
ENTRY main {
  x = f32[16,32] parameter(0)
  wg = f32[32,64] parameter(1)
  wu = f32[32,64] parameter(2)
  wd = f32[64,32] parameter(3)
  gate = f32[16,64] dot(x, wg), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  up = f32[16,64] dot(x, wu), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  sg = f32[16,64] logistic(gate)
  silu = f32[16,64] multiply(gate, sg)
  h = f32[16,64] multiply(silu, up)
  down = f32[16,32] dot(h, wd), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT out = f32[16,32] add(x, down)
})";
  Closeness closeness;
  LoopFusionStats stats;
  std::unique_ptr<HloModule> fused = FuseAndCompareClose(text, rng, stats, closeness);
  EXPECT_EQ(stats.output_fusions, 2) << fused->ToString();
  EXPECT_EQ(stats.fusions, 3) << fused->ToString();
  const HloInstruction* root = fused->entry_computation()->root_instruction();
  ASSERT_EQ(root->opcode(), HloOpcode::kFusion);
  EXPECT_EQ(root->attrs().fusion_kind, FusionKind::kOutput);
  ASSERT_EQ(root->operand_count(), 3);
  EXPECT_EQ(root->operand(0)->name(), "x");  // the residual, met first from add(x, down)
  const HloInstruction* h = root->operand(1);
  ASSERT_EQ(h->opcode(), HloOpcode::kFusion) << fused->ToString();
  EXPECT_EQ(h->attrs().fusion_kind, FusionKind::kOutput);
  EXPECT_EQ(FusedOps(*h), (std::multiset<std::string>{"dot", "multiply"}));
  EXPECT_EQ(CountOutsideFusions(*fused, HloOpcode::kDot), 1);  // gate
  // A second run finds nothing more.
  const std::string printed = fused->ToString();
  EXPECT_EQ(FuseLoops(*fused).fusions, 0);
  EXPECT_EQ(fused->ToString(), printed);
}

TEST(FuseLoops, PrintsFusedComputationsBeforeTheirUsers) {
  const std::string text = R"(HloModule order
ENTRY main {
  x = f32[8,128] parameter(0)
  b = f32[128] parameter(1)
  bb = f32[8,128] broadcast(b), dimensions={1}
  ROOT y = f32[8,128] add(x, bb)
})";
  std::unique_ptr<HloModule> module = ParseHloModule(text);
  FuseLoops(*module);
  const std::string printed = module->ToString();
  const size_t fused_at = printed.find("fused_computation");
  const size_t entry_at = printed.find("ENTRY");
  ASSERT_NE(fused_at, std::string::npos) << printed;
  EXPECT_LT(fused_at, entry_at) << printed;
  EXPECT_NE(printed.find("fusion(x, b), kind=kLoop, calls=fused_computation"), std::string::npos)
      << printed;
  // A second run finds nothing more to fuse.
  EXPECT_EQ(FuseLoops(*module).fusions, 0);
  EXPECT_EQ(module->ToString(), printed);
}

}  // namespace
}  // namespace weft::compiler
