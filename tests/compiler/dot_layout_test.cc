// compiler::PlanDotLayout, the one decision of which dot operands the
// executor packs, on random dot shapes and dimension orders: against a
// brute-force walk of every element's address (an operand is read in place
// exactly when its addresses are an affine function of (batch, row, col)
// with a unit matrix stride; it is dense exactly when its dims are in
// order), then InstructionScratch reserves exactly the packed operands, and
// the executor runs the same dots with no scratch outside the reservation
// and the naive product's values.
#include "weft/compiler/dot_layout.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "weft/base/cpu.h"
#include "weft/compiler/buffer_assignment.h"
#include "weft/compiler/fusion.h"
#include "weft/hlo/parser.h"
#include "weft/kernels/simd.h"
#include "weft/runtime/executor.h"
#include "weft/runtime/run_command.h"

namespace weft::compiler {
namespace {

// A random dot: dims sizes and dimension numbers (batch and contracting
// dims in a random order, at random positions in each operand).
struct RandomDot {
  std::vector<int64_t> lhs_dims, rhs_dims;
  DotDimensionNumbers dn;
};

RandomDot MakeRandomDot(std::mt19937& rng) {
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  auto size = [&] { return pick(4) == 0 ? int64_t{1} : int64_t{2 + pick(4)}; };
  const int nb = pick(3), nk = pick(3), nm = pick(3), nn = pick(3);
  std::vector<int64_t> batch(nb), contract(nk);
  for (auto& s : batch) s = size();
  for (auto& s : contract) s = size();
  RandomDot d;
  // Places the groups at random positions; returns the dims and the
  // positions of batch and contracting dims (in group order).
  auto operand = [&](int nfree, std::vector<int64_t>* dims, std::vector<int64_t>* batch_pos,
                     std::vector<int64_t>* contract_pos) {
    const int rank = nb + nk + nfree;
    std::vector<int64_t> pos(rank);
    for (int i = 0; i < rank; ++i) pos[i] = i;
    std::shuffle(pos.begin(), pos.end(), rng);
    dims->assign(rank, 0);
    for (int i = 0; i < nb; ++i) {
      batch_pos->push_back(pos[i]);
      (*dims)[pos[i]] = batch[i];
    }
    for (int i = 0; i < nk; ++i) {
      contract_pos->push_back(pos[nb + i]);
      (*dims)[pos[nb + i]] = contract[i];
    }
    for (int i = nb + nk; i < rank; ++i) (*dims)[pos[i]] = size();
  };
  operand(nm, &d.lhs_dims, &d.dn.lhs_batch_dims, &d.dn.lhs_contracting_dims);
  operand(nn, &d.rhs_dims, &d.dn.rhs_batch_dims, &d.dn.rhs_contracting_dims);
  return d;
}

int64_t Product(const std::vector<int64_t>& dims, const std::vector<int64_t>& which) {
  int64_t n = 1;
  for (int64_t d : which) n *= dims[d];
  return n;
}

// The element offset in a row-major buffer of `dims` of merged index `b`,
// `r`, `c` of the groups (each a list of dims, the last one fastest).
int64_t Address(const std::vector<int64_t>& dims, const std::vector<int64_t>& batch,
                const std::vector<int64_t>& rows, const std::vector<int64_t>& cols, int64_t b,
                int64_t r, int64_t c) {
  std::vector<int64_t> index(dims.size(), 0);
  auto spread = [&](const std::vector<int64_t>& group, int64_t i) {
    for (auto it = group.rbegin(); it != group.rend(); ++it) {
      index[*it] = i % dims[*it];
      i /= dims[*it];
    }
  };
  spread(batch, b);
  spread(rows, r);
  spread(cols, c);
  int64_t offset = 0;
  for (size_t d = 0; d < dims.size(); ++d) offset = offset * dims[d] + index[d];
  return offset;
}

// What the brute force finds for one operand.
struct Walk {
  int64_t bn = 1, rn = 1, cn = 1;
  bool affine = true;              // address = b bs + r rs + c cs for all elements
  int64_t bs = 0, rs = 0, cs = 0;  // (where the extent is > 1)
  bool row_major = true;           // address = (b rn + r) cn + c
  bool transposed = true;          // address = (b cn + c) rn + r
};

Walk WalkOperand(const std::vector<int64_t>& dims, const std::vector<int64_t>& batch,
                 const std::vector<int64_t>& rows, const std::vector<int64_t>& cols) {
  Walk w;
  w.bn = Product(dims, batch);
  w.rn = Product(dims, rows);
  w.cn = Product(dims, cols);
  auto at = [&](int64_t b, int64_t r, int64_t c) {
    return Address(dims, batch, rows, cols, b, r, c);
  };
  const int64_t base = at(0, 0, 0);
  EXPECT_EQ(base, 0);
  if (w.bn > 1) w.bs = at(1, 0, 0);
  if (w.rn > 1) w.rs = at(0, 1, 0);
  if (w.cn > 1) w.cs = at(0, 0, 1);
  for (int64_t b = 0; b < w.bn; ++b) {
    for (int64_t r = 0; r < w.rn; ++r) {
      for (int64_t c = 0; c < w.cn; ++c) {
        const int64_t a = at(b, r, c);
        w.affine = w.affine && a == b * w.bs + r * w.rs + c * w.cs;
        w.row_major = w.row_major && a == (b * w.rn + r) * w.cn + c;
        w.transposed = w.transposed && a == (b * w.cn + c) * w.rn + r;
      }
    }
  }
  return w;
}

std::vector<int64_t> Concat(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                            const std::vector<int64_t>& c) {
  std::vector<int64_t> out = a;
  out.insert(out.end(), b.begin(), b.end());
  out.insert(out.end(), c.begin(), c.end());
  return out;
}

// One operand's view against its walk.
void CheckView(const std::optional<MatrixView>& view, const std::vector<int64_t>& dims,
               const std::vector<int64_t>& batch, const std::vector<int64_t>& rows,
               const std::vector<int64_t>& cols, const std::string& what) {
  const Walk w = WalkOperand(dims, batch, rows, cols);
  EXPECT_EQ(IsInOrder(Concat(batch, rows, cols), dims), w.row_major) << what;
  EXPECT_EQ(IsInOrder(Concat(batch, cols, rows), dims), w.transposed) << what;
  // oneDNN's matmul: a unit stride one way, the leading dim covering the
  // other extent; vectors fit either way.
  const bool unit =
      w.rn == 1 || w.cn == 1 || (w.cs == 1 && w.rs >= w.cn) || (w.rs == 1 && w.cs >= w.rn);
  const bool in_place = w.affine && unit;
  ASSERT_EQ(view.has_value(), in_place) << what;
  if (!view) return;
  EXPECT_EQ(view->batch, w.bn) << what;
  EXPECT_EQ(view->rows, w.rn) << what;
  EXPECT_EQ(view->cols, w.cn) << what;
  if (w.bn > 1) {
    EXPECT_EQ(view->batch_stride, w.bs) << what;
  }
  if (w.rn > 1) {
    EXPECT_EQ(view->row_stride, w.rs) << what;
  }
  if (w.cn > 1) {
    EXPECT_EQ(view->col_stride, w.cs) << what;
  }
  // Every element of the view lies inside the buffer.
  const int64_t last = (w.bn - 1) * view->batch_stride + (w.rn - 1) * view->row_stride +
                       (w.cn - 1) * view->col_stride;
  EXPECT_LT(last, Product(dims, Concat(batch, rows, cols))) << what;
  EXPECT_EQ(view->IsDense(), w.row_major || w.transposed) << what;
}

std::string Dims(const std::vector<int64_t>& v) { return fmt::format("{}", fmt::join(v, ",")); }

// The dot as a module: operands of type `in`, result of type `out`.
std::string DotText(const RandomDot& d, const DotGroups& g, std::string_view in = "f32",
                    std::string_view out_type = "f32") {
  std::vector<int64_t> out;
  for (int64_t x : d.dn.lhs_batch_dims) out.push_back(d.lhs_dims[x]);
  for (int64_t x : g.lhs_free) out.push_back(d.lhs_dims[x]);
  for (int64_t x : g.rhs_free) out.push_back(d.rhs_dims[x]);
  return fmt::format(
      "HloModule dot\nENTRY e {{\n  a = {0}[{2}] parameter(0)\n  b = {0}[{3}] parameter(1)\n"
      "  ROOT d = {1}[{4}] dot(a, b), lhs_batch_dims={{{5}}}, lhs_contracting_dims={{{6}}}, "
      "rhs_batch_dims={{{7}}}, rhs_contracting_dims={{{8}}}\n}}\n",
      in, out_type, Dims(d.lhs_dims), Dims(d.rhs_dims), Dims(out), Dims(d.dn.lhs_batch_dims),
      Dims(d.dn.lhs_contracting_dims), Dims(d.dn.rhs_batch_dims), Dims(d.dn.rhs_contracting_dims));
}

TEST(DotLayoutTest, DecisionMatchesABruteForceWalkOfEveryAddress) {
  std::mt19937 rng(20240613);
  int packed = 0, in_place = 0, strided = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const RandomDot d = MakeRandomDot(rng);
    const DotLayout layout = PlanDotLayout(d.dn, d.lhs_dims, d.rhs_dims);
    const DotGroups& g = layout.groups;
    const std::string what = DotText(d, g);
    EXPECT_EQ(g.batch, Product(d.lhs_dims, d.dn.lhs_batch_dims)) << what;
    EXPECT_EQ(g.batch, Product(d.rhs_dims, d.dn.rhs_batch_dims)) << what;
    EXPECT_EQ(g.k, Product(d.rhs_dims, d.dn.rhs_contracting_dims)) << what;
    EXPECT_EQ(g.m * g.k * g.batch, Product(d.lhs_dims, Concat(d.dn.lhs_batch_dims, g.lhs_free,
                                                              d.dn.lhs_contracting_dims)))
        << what;
    EXPECT_EQ(g.lhs_free.size() + d.dn.lhs_batch_dims.size() + d.dn.lhs_contracting_dims.size(),
              d.lhs_dims.size());
    EXPECT_TRUE(std::is_sorted(g.lhs_free.begin(), g.lhs_free.end()));
    CheckView(layout.lhs, d.lhs_dims, d.dn.lhs_batch_dims, g.lhs_free, d.dn.lhs_contracting_dims,
              "lhs of " + what);
    CheckView(layout.rhs, d.rhs_dims, d.dn.rhs_batch_dims, d.dn.rhs_contracting_dims, g.rhs_free,
              "rhs of " + what);
    EXPECT_EQ(layout.may_pack_both,
              (layout.lhs && !layout.lhs->IsDense()) || (layout.rhs && !layout.rhs->IsDense()))
        << what;
    packed += layout.pack_lhs() + layout.pack_rhs();
    in_place += !layout.pack_lhs() + !layout.pack_rhs();
    strided += layout.may_pack_both;
  }
  // The random dots reach every kind of decision.
  EXPECT_GT(packed, 100);
  EXPECT_GT(in_place, 100);
  EXPECT_GT(strided, 100);
}

// The compiler reserves scratch for exactly the operands the decision packs
// (both where oneDNN might refuse the strides), as copies in the operands'
// own type (f32, or bf16 for a bf16 GEMM: compiler::IsBf16Gemm), the
// executor asks for no scratch beyond it, and its product is the naive one:
// within 1e-5 of the sum of |products| (f32 accumulation of exact
// products), and for a bf16 result half a bf16 ulp (2^-8 relative) beyond.
// `expect_planned`: whether the executor's path is the one planned (for
// bf16, oneDNN's bf16 matmul: where bf16 instructions are allowed on a CPU
// with avx512_core).
void CheckScratchAgainstTheExecutor(std::string_view in, std::string_view out_type,
                                    bool expect_planned, uint32_t seed) {
  std::mt19937 rng(seed);
  int strided_unpacked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const RandomDot d = MakeRandomDot(rng);
    const DotLayout layout = PlanDotLayout(d.dn, d.lhs_dims, d.rhs_dims);
    const DotGroups& g = layout.groups;
    const std::string text = DotText(d, g, in, out_type);
    const std::unique_ptr<HloModule> module = ParseHloModule(text);
    const HloInstruction* dot = module->entry_computation()->root_instruction();
    std::vector<Shape> want;
    if (layout.pack_lhs() || layout.may_pack_both) want.push_back(dot->operand(0)->shape());
    if (layout.pack_rhs() || layout.may_pack_both) want.push_back(dot->operand(1)->shape());
    ASSERT_EQ(InstructionScratch(*dot), want) << text;
    if (layout.may_pack_both && layout.lhs && layout.rhs) ++strided_unpacked;

    runtime::Executor exec(*module);
    const std::vector<Shape> shapes = exec.InputShapes();
    const std::vector<runtime::HostTensor> inputs =
        runtime::RandomInputs(shapes, 1000 + static_cast<uint64_t>(trial));
    const std::vector<runtime::HostTensor> out = exec.Run(inputs);
    ASSERT_EQ(out.size(), 1u);
    if (expect_planned) {
      EXPECT_EQ(exec.stats().unplanned_bytes, 0) << text;
    }
    EXPECT_EQ(exec.stats().misplaced_results, 0) << text;

    const bool bf16_result = out_type == "bf16";
    const std::vector<double> a = inputs[0].ToDoubles(), b = inputs[1].ToDoubles();
    const std::vector<double> c = out[0].ToDoubles();
    ASSERT_EQ(static_cast<int64_t>(c.size()), g.batch * g.m * g.n) << text;
    for (int64_t p = 0; p < g.batch; ++p) {
      for (int64_t i = 0; i < g.m; ++i) {
        for (int64_t j = 0; j < g.n; ++j) {
          double ref = 0, mag = 0;
          for (int64_t l = 0; l < g.k; ++l) {
            const double x = a[Address(d.lhs_dims, d.dn.lhs_batch_dims, g.lhs_free,
                                       d.dn.lhs_contracting_dims, p, i, l)];
            const double y = b[Address(d.rhs_dims, d.dn.rhs_batch_dims, d.dn.rhs_contracting_dims,
                                       g.rhs_free, p, l, j)];
            ref += x * y;
            mag += std::abs(x * y);
          }
          const double bound =
              1e-5 * mag + 1e-6 + (bf16_result ? std::ldexp(std::abs(ref), -8) : 0.0);
          ASSERT_NEAR(c[(p * g.m + i) * g.n + j], ref, bound)
              << text << " at " << p << "," << i << "," << j;
        }
      }
    }
  }
  EXPECT_GT(strided_unpacked, 10);
}

TEST(DotLayoutTest, ScratchIsReservedForThePackedOperandsAndTheExecutorAgrees) {
  CheckScratchAgainstTheExecutor("f32", "f32", true, 77);
}

TEST(DotLayoutTest, Bf16GemmsReserveBf16PackedCopiesOnlyAndTheExecutorAgrees) {
  const bool native = kernels::simd::Bf16InstructionsAllowed() && GetCpuInfo().HasAvx512();
  CheckScratchAgainstTheExecutor("bf16", "bf16", native, 79);
  CheckScratchAgainstTheExecutor("bf16", "f32", native, 80);
  // Other float dots of half types still compute on f32 copies, reserved.
  const std::unique_ptr<HloModule> module = ParseHloModule(R"(HloModule m
ENTRY e {
  a = f16[4,6] parameter(0)
  b = f16[6,5] parameter(1)
  ROOT d = f32[4,5] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})");
  EXPECT_EQ(InstructionScratch(*module->entry_computation()->root_instruction()),
            (std::vector<Shape>{ParseShape("f32[4,6]"), ParseShape("f32[6,5]")}));
}

// An output fusion (kind=kOutput) of each random dot with add(y, dot): its
// scratch is its dot's, the executor asks for nothing beyond it, and the
// result is the naive product plus y.
TEST(DotLayoutTest, OutputFusionScratchIsItsDots) {
  std::mt19937 rng(78);
  for (int trial = 0; trial < 120; ++trial) {
    const RandomDot d = MakeRandomDot(rng);
    const DotLayout layout = PlanDotLayout(d.dn, d.lhs_dims, d.rhs_dims);
    const DotGroups& g = layout.groups;
    std::vector<int64_t> out;
    for (int64_t x : d.dn.lhs_batch_dims) out.push_back(d.lhs_dims[x]);
    for (int64_t x : g.lhs_free) out.push_back(d.lhs_dims[x]);
    for (int64_t x : g.rhs_free) out.push_back(d.rhs_dims[x]);
    std::string text = DotText(d, g);
    const size_t root = text.find("  ROOT d = ");
    ASSERT_NE(root, std::string::npos);
    text.replace(root, 11, fmt::format("  y = f32[{}] parameter(2)\n  d = ", Dims(out)));
    text.insert(text.rfind('}'), fmt::format("  ROOT s = f32[{}] add(y, d)\n", Dims(out)));
    const std::unique_ptr<HloModule> unfused = ParseHloModule(text);
    const std::vector<Shape> want =
        InstructionScratch(*unfused->entry_computation()->GetInstruction("d"));
    const std::unique_ptr<HloModule> module = ParseHloModule(text);
    ASSERT_EQ(FuseLoops(*module).output_fusions, 1) << text;
    const HloInstruction* fusion = module->entry_computation()->root_instruction();
    ASSERT_EQ(fusion->attrs().fusion_kind, FusionKind::kOutput) << module->ToString();
    EXPECT_EQ(InstructionScratch(*fusion), want) << module->ToString();

    runtime::Executor exec(*module);
    const std::vector<runtime::HostTensor> inputs =
        runtime::RandomInputs(exec.InputShapes(), 5000 + static_cast<uint64_t>(trial));
    const std::vector<runtime::HostTensor> result = exec.Run(inputs);
    ASSERT_EQ(result.size(), 1u);
    EXPECT_EQ(exec.stats().unplanned_bytes, 0) << module->ToString();
    EXPECT_EQ(exec.stats().misplaced_results, 0) << module->ToString();
    const std::vector<double> a = inputs[0].ToDoubles(), b = inputs[1].ToDoubles();
    const std::vector<double> y = inputs[2].ToDoubles(), c = result[0].ToDoubles();
    for (int64_t p = 0; p < g.batch; ++p) {
      for (int64_t i = 0; i < g.m; ++i) {
        for (int64_t j = 0; j < g.n; ++j) {
          const int64_t e = (p * g.m + i) * g.n + j;
          double ref = y[e], mag = std::abs(y[e]);
          for (int64_t l = 0; l < g.k; ++l) {
            const double x = a[Address(d.lhs_dims, d.dn.lhs_batch_dims, g.lhs_free,
                                       d.dn.lhs_contracting_dims, p, i, l)];
            const double w = b[Address(d.rhs_dims, d.dn.rhs_batch_dims, d.dn.rhs_contracting_dims,
                                       g.rhs_free, p, l, j)];
            ref += x * w;
            mag += std::abs(x * w);
          }
          ASSERT_NEAR(c[e], ref, 1e-5 * mag + 1e-6) << module->ToString() << " at " << e;
        }
      }
    }
  }
}

}  // namespace
}  // namespace weft::compiler
