// dot with general dimension numbers: each operand is viewed as a batch of
// matrices — lhs [batch, M, K], rhs [batch, K, N] — and multiplied with
// oneDNN's matmul primitive. The view is strided: each of batch, rows and
// cols is a group of the operand's dims that merges into one strided dim
// (in any order in memory), so transposed and permuted operands, including
// batched ones with any batch stride, are read in place. oneDNN's matmul
// needs one of the two matrix strides to be 1; an operand whose groups do
// not merge, or whose matrices have no unit stride, is transposed into a
// packed [batch, rows, cols] copy first. Which operands are packed is
// compiler::PlanDotLayout's decision (compiler/dot_layout.h), the one the
// buffer assignment reserves their scratch by. That layout, whether weft's
// own GEMM runs the dot, and oneDNN's primitive with its argument memory
// objects (their data handles set each run) are made once per instruction
// and kept in the executor's InstructionCache. An output fusion (fusion kind=kOutput,
// eval_fusion.cc) runs its dot through the same RunDot with a oneDNN binary
// post-op (add or mul) per step of its chain, src1 being the step's other
// operand in the dense [batch, M, N] layout of the dot's result; its plan is
// cached under the fusion instruction, with the post-ops in the primitive's
// attributes (output fusions are f32 only). The result is [batch, M, N],
// which is XLA's dot output order (batch dims, lhs free dims, rhs free dims).
// Element types: a dot of two bf16 operands to bf16 or f32
// (compiler::IsBf16Gemm) runs oneDNN's bf16 matmul on the operands as they
// are (packed copies at 2 bytes; f32 accumulation, the result written in its
// own type), unless oneDNN has no bf16 kernel here (primitive creation
// fails) or WEFT_ISA / a ScopedIsa forces an instruction set without bf16
// instructions (kernels::simd::Bf16InstructionsAllowed): then, like every
// other float dot, it computes in f32 on converted copies (same layout) and
// rounds the f32 result into its type. Integer dots accumulate in int64.
#include <algorithm>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <span>
#include <unordered_map>

#include "executor_eval.h"
#include "weft/base/error.h"
#include "weft/base/thread_pool.h"
#include "weft/compiler/dot_layout.h"
#include "weft/kernels/simd.h"

namespace weft::runtime::exec {
namespace {

std::vector<int64_t> Concat(std::initializer_list<const std::vector<int64_t>*> parts) {
  std::vector<int64_t> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

// One operand as a batch of row-major matrices, transposed or not.
struct MatrixOperand {
  const void* data = nullptr;
  bool transposed = false;  // stored [batch, cols, rows]
  HostTensor holder;        // keeps a packed copy alive
};

// Views `x` (element type converted to `type` when needed) as
// [batch, rows, cols] where batch/rows/cols are lists of its dims.
MatrixOperand AsMatrices(const HostTensor& x, PrimitiveType type, const std::vector<int64_t>& batch,
                         const std::vector<int64_t>& rows, const std::vector<int64_t>& cols,
                         EvalArgs& args) {
  MatrixOperand m;
  HostTensor src = x;
  if (x.element_type() != type) {
    src = args.ctx().Allocate(x.shape().WithElementType(type));
    ConvertElements(x.element_type(), x.raw_data(), type, src.mutable_raw_data(),
                    x.element_count());
  }
  const std::vector<int64_t>& dims = x.dimensions();
  if (compiler::IsInOrder(Concat({&batch, &rows, &cols}), dims)) {
    m.data = src.raw_data();
  } else if (compiler::IsInOrder(Concat({&batch, &cols, &rows}), dims)) {
    m.data = src.raw_data();
    m.transposed = true;
  } else {
    HostTensor packed = args.ctx().Allocate(src.shape());
    TransposeBytes(src.raw_data(), dims, Concat({&batch, &rows, &cols}), ByteWidth(type),
                   packed.mutable_raw_data());
    m.data = packed.raw_data();
    src = std::move(packed);
  }
  m.holder = std::move(src);
  return m;
}

template <typename T>
void IntegerGemm(const T* a, bool ta, const T* b, bool tb, T* c, int64_t batch, int64_t m,
                 int64_t n, int64_t k) {
  for (int64_t p = 0; p < batch; ++p) {
    const T* ap = a + p * m * k;
    const T* bp = b + p * k * n;
    T* cp = c + p * m * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t acc = 0;
        for (int64_t l = 0; l < k; ++l) {
          const int64_t x = ta ? ap[l * m + i] : ap[i * k + l];
          const int64_t y = tb ? bp[j * k + l] : bp[l * n + j];
          acc = static_cast<int64_t>(static_cast<uint64_t>(acc) +
                                     static_cast<uint64_t>(x) * static_cast<uint64_t>(y));
        }
        cp[i * n + j] = static_cast<T>(acc);
      }
    }
  }
}

const dnnl::engine& CpuEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

using DataType = dnnl::memory::data_type;

// The element types one dot's GEMM reads (both operands) and writes.
struct GemmTypes {
  DataType src = DataType::f32, dst = DataType::f32;
};

// What one dot instruction keeps across runs: its operands' layout (from
// the instruction's shapes), whether weft's own GEMM runs it, and for
// oneDNN the element types its GEMM computes in, which operands are packed
// before it, their memory descriptors, and the matmul primitive (made on
// the first run that needs it).
struct DotPlan {
  compiler::DotLayout layout;
  bool weft_gemm = false;  // RunsOnWeftGemm
  // The GEMM reads the bf16 operands as they are and writes the result's
  // type (else f32 copies in, an f32 result out).
  bool bf16 = false;
  // simd::Bf16InstructionsAllowed() when the plan was made: a run that sees
  // another answer (a ScopedIsa in between) makes a new plan.
  bool bf16_allowed = false;
  bool pack_lhs = false, pack_rhs = false;
  dnnl::memory::desc lhs_md, rhs_md, out_md;
  std::vector<HloOpcode> post_ops;  // binary post-ops (src1 laid out as out_md)
  dnnl::matmul primitive;
  std::optional<dnnl::stream> stream;  // set once the primitive is made
  // The primitive's arguments (source, weights, destination, post-ops'
  // second sources), their data handles set on each run.
  std::unordered_map<int, dnnl::memory> exec_args;
};

dnnl::memory::desc Desc(const compiler::MatrixView& v, DataType type) {
  return dnnl::memory::desc({v.batch, v.rows, v.cols}, type,
                            {v.batch_stride, v.row_stride, v.col_stride});
}

// Makes `plan`'s primitive for `types`, the operands read as `layout` says,
// or both packed where oneDNN has no kernel for the in-place strides and the
// compiler reserved scratch for that (DotLayout::may_pack_both). False when
// oneDNN has no kernel for either.
bool MakePrimitive(DotPlan& plan, const compiler::DotLayout& layout, GemmTypes types) {
  const compiler::DotGroups& g = layout.groups;
  auto make = [&](bool pack_lhs, bool pack_rhs) {
    plan.pack_lhs = pack_lhs;
    plan.pack_rhs = pack_rhs;
    plan.lhs_md =
        Desc(pack_lhs ? compiler::PackedMatrices(g.batch, g.m, g.k) : *layout.lhs, types.src);
    plan.rhs_md =
        Desc(pack_rhs ? compiler::PackedMatrices(g.batch, g.k, g.n) : *layout.rhs, types.src);
    plan.out_md = Desc(compiler::PackedMatrices(g.batch, g.m, g.n), types.dst);
    dnnl::post_ops ops;
    for (HloOpcode op : plan.post_ops) {
      ops.append_binary(
          op == HloOpcode::kAdd ? dnnl::algorithm::binary_add : dnnl::algorithm::binary_mul,
          plan.out_md);
    }
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(plan.lhs_md, plan.rhs_md, plan.out_md),
                                      attr, CpuEngine());
      plan.primitive = dnnl::matmul(pd);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  };
  if (make(layout.pack_lhs(), layout.pack_rhs())) return true;
  return layout.may_pack_both && make(true, true);
}

}  // namespace

void CheckDot(const HloInstruction& instr) {
  const PrimitiveType in = instr.operand(0)->shape().element_type();
  const PrimitiveType out = instr.shape().element_type();
  WEFT_CHECK(in != PrimitiveType::kPred && out != PrimitiveType::kPred,
             "dot of pred is not supported");
  WEFT_CHECK(IsFloatingPoint(in) == IsFloatingPoint(out),
             "dot from {} to {} is not supported (mix of integer and floating point)",
             PrimitiveTypeName(in), PrimitiveTypeName(out));
}

namespace {

// `plan`'s matmul primitive for `instr`, made on the first run that needs
// one (and again when simd::Bf16InstructionsAllowed() has changed since):
// bf16 when the dot's types allow it (compiler::IsBf16Gemm), bf16
// instructions are allowed and oneDNN has a bf16 kernel here, else f32.
void MakePrimitive(const HloInstruction& instr, DotPlan& plan, bool bf16_allowed) {
  const compiler::DotLayout& layout = plan.layout;
  plan.bf16_allowed = bf16_allowed;
  const PrimitiveType out_type = instr.shape().element_type();
  const DataType dst = out_type == PrimitiveType::kBF16 ? DataType::bf16 : DataType::f32;
  plan.bf16 = bf16_allowed && plan.post_ops.empty() &&
              compiler::IsBf16Gemm(instr.operand(0)->shape().element_type(),
                                   instr.operand(1)->shape().element_type(), out_type) &&
              MakePrimitive(plan, layout, {DataType::bf16, dst});
  if (!plan.bf16) {
    const compiler::DotGroups& g = layout.groups;
    const bool made = MakePrimitive(plan, layout, {});
    WEFT_INTERNAL_CHECK(made,
                        "oneDNN has no f32 matmul for the operand layouts of dot '{}' "
                        "([{},{},{}] x [{},{},{}])",
                        instr.name(), g.batch, g.m, g.k, g.batch, g.k, g.n);
  }
  if (!plan.stream) plan.stream.emplace(CpuEngine());
  const dnnl::engine& engine = CpuEngine();
  plan.exec_args.clear();
  plan.exec_args.emplace(DNNL_ARG_SRC, dnnl::memory(plan.lhs_md, engine, DNNL_MEMORY_NONE));
  plan.exec_args.emplace(DNNL_ARG_WEIGHTS, dnnl::memory(plan.rhs_md, engine, DNNL_MEMORY_NONE));
  plan.exec_args.emplace(DNNL_ARG_DST, dnnl::memory(plan.out_md, engine, DNNL_MEMORY_NONE));
  for (size_t i = 0; i < plan.post_ops.size(); ++i) {
    plan.exec_args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1,
                           dnnl::memory(plan.out_md, engine, DNNL_MEMORY_NONE));
  }
}

// `x` as f32 (a converted copy when it is not), in its own layout.
HostTensor AsF32(const HostTensor& x, EvalArgs& args) {
  if (x.element_type() == PrimitiveType::kF32) return x;
  HostTensor out = args.ctx().Allocate(x.shape().WithElementType(PrimitiveType::kF32));
  ConvertElements(x.element_type(), x.raw_data(), PrimitiveType::kF32, out.mutable_raw_data(),
                  x.element_count());
  return out;
}

// One GEMM operand: `x` (an f32 copy unless the plan reads bf16), transposed
// into packed [batch, rows, cols] order when `pack`.
HostTensor GemmOperand(const HostTensor& x, bool bf16, bool pack, const std::vector<int64_t>& batch,
                       const std::vector<int64_t>& rows, const std::vector<int64_t>& cols,
                       EvalArgs& args) {
  HostTensor y = bf16 ? x : AsF32(x, args);
  if (!pack) return y;
  HostTensor packed = args.ctx().Allocate(y.shape());
  TransposeBytes(y.raw_data(), y.dimensions(), Concat({&batch, &rows, &cols}),
                 ByteWidth(y.element_type()), packed.mutable_raw_data());
  return packed;
}

// Runs the plan's primitive: c = a x b (then the post-ops).
void Execute(DotPlan& plan, const HostTensor& a, const HostTensor& b, void* c,
             std::span<const DotPostOp> post_ops, const compiler::DotGroups& g) {
  // The arguments' memory objects are made with the primitive and point at
  // this run's buffers.
  std::unordered_map<int, dnnl::memory>& exec_args = plan.exec_args;
  exec_args.at(DNNL_ARG_SRC).set_data_handle(const_cast<void*>(a.raw_data()));
  exec_args.at(DNNL_ARG_WEIGHTS).set_data_handle(const_cast<void*>(b.raw_data()));
  exec_args.at(DNNL_ARG_DST).set_data_handle(c);
  for (size_t i = 0; i < post_ops.size(); ++i) {
    exec_args.at(DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1)
        .set_data_handle(const_cast<void*>(post_ops[i].src1->raw_data()));
  }
  try {
    plan.primitive.execute(*plan.stream, exec_args);
    plan.stream->wait();
  } catch (const dnnl::error& e) {
    throw InternalError(fmt::format("oneDNN {} matmul failed ({}) for [{},{},{}] x [{},{},{}]",
                                    plan.bf16 ? "bf16" : "f32", e.what(), g.batch, g.m, g.k,
                                    g.batch, g.k, g.n));
  }
}

// An empty contraction: zeros (the same bits in every float type), then the
// post-ops as the unfused ops would.
void ZeroResult(HostTensor& out, std::span<const DotPostOp> post_ops) {
  std::memset(out.mutable_raw_data(), 0, static_cast<size_t>(out.byte_size()));
  for (const DotPostOp& p : post_ops) {
    float* c = out.mutable_data<float>();
    const float* s1 = p.src1->data<float>();
    for (int64_t i = 0; i < out.element_count(); ++i) {
      c[i] = p.op == HloOpcode::kAdd ? c[i] + s1[i] : c[i] * s1[i];
    }
  }
}

// Whether a dot runs on weft's own f32 GEMM (WeftGemm) instead of oneDNN:
// f32 operands and result, no post-ops, an lhs read in place with its rows
// (M) at unit stride — a weight gradient, x^T dy, whose K (the tokens) is the
// outer dim of both operands — and an rhs read in place row-major, N a
// multiple of simd::kPadN. oneDNN's matmul copies such an lhs into its own
// layout first; in training tiny's weight gradients on four devices took ~5%
// less time on weft's kernel, small's on one device the same (hot in cache
// the two are level; docs/PERFORMANCE.md, session 31).
bool RunsOnWeftGemm(const compiler::DotLayout& layout, const HostTensor& lhs, const HostTensor& rhs,
                    const HostTensor& out, std::span<const DotPostOp> post_ops) {
  const PrimitiveType f32 = PrimitiveType::kF32;
  const compiler::DotGroups& g = layout.groups;
  return post_ops.empty() && lhs.element_type() == f32 && rhs.element_type() == f32 &&
         out.element_type() == f32 && layout.lhs && layout.rhs && g.m > 1 &&
         layout.lhs->row_stride == 1 && layout.lhs->col_stride >= g.m &&
         layout.rhs->col_stride == 1 && layout.rhs->row_stride >= g.n &&
         g.n % kernels::simd::kPadN == 0;
}

// out[p] = lhs[p]^T-stored x rhs[p] for each batch p, with
// simd::Primitives::gemm_transposed_a, whose passes over 256 rows of K keep
// the lhs's rows of a pass in L2 across all the columns. The calling
// thread's team splits the matrices: whole ones when there are enough,
// else each into column ranges of whole 32-column register blocks (each
// thread then streams its own part of the rhs once), or row ranges of 8
// where the columns are too few. 64 x 64 tiles read the operands ~N/64 and
// M/64 times and ran small's [512,4096] x [4096,1536] at 0.8x oneDNN. Each
// element is summed over k in order whatever the split, so the bits do not
// depend on the team.
void WeftGemm(const compiler::DotLayout& layout, const HostTensor& lhs, const HostTensor& rhs,
              HostTensor& out) {
  constexpr int64_t kBlockN = 2 * kernels::simd::kPadN, kBlockM = 8;
  const compiler::DotGroups& g = layout.groups;
  const compiler::MatrixView& a = *layout.lhs;
  const compiler::MatrixView& b = *layout.rhs;
  const kernels::simd::Primitives& simd = kernels::simd::GetPrimitives();
  ThreadPool& pool = ThreadPool::Global();
  const int64_t team = pool.TeamSize();
  const int64_t per_matrix = g.batch >= team ? 1 : (team + g.batch - 1) / g.batch;
  const int64_t panels = std::max<int64_t>(1, g.n / kBlockN);
  const int64_t row_blocks = (g.m + kBlockM - 1) / kBlockM;
  const int64_t parts_n = panels >= per_matrix ? per_matrix : 1;
  const int64_t parts_m = parts_n > 1 ? 1 : std::min(per_matrix, row_blocks);
  const float* A = lhs.data<float>();
  const float* B = rhs.data<float>();
  float* C = out.mutable_data<float>();
  pool.ParallelFor(g.batch * parts_m * parts_n, [&](int64_t task, int) {
    const int64_t p = task / (parts_m * parts_n), i = task / parts_n % parts_m, j = task % parts_n;
    const int64_t m0 = std::min(g.m, row_blocks * i / parts_m * kBlockM);
    const int64_t m1 = std::min(g.m, row_blocks * (i + 1) / parts_m * kBlockM);
    const int64_t n0 = panels * j / parts_n * kBlockN;
    const int64_t n1 = j + 1 == parts_n ? g.n : panels * (j + 1) / parts_n * kBlockN;
    if (m1 <= m0 || n1 <= n0) return;
    simd.gemm_transposed_a(m1 - m0, n1 - n0, g.k, A + p * a.batch_stride + m0, a.col_stride,
                           B + p * b.batch_stride + n0, b.row_stride, kernels::simd::kPadN,
                           C + (p * g.m + m0) * g.n + n0, g.n, false);
  });
}

// The plan of `instr`, made on its first run and kept under `key`: the dot
// itself, or the output fusion holding it (whose post-ops are part of the
// primitive). The operands' shapes are the instruction's, so their layout
// is planned once.
DotPlan& PlanFor(const HloInstruction& instr, const HloInstruction& key, const HostTensor& lhs,
                 const HostTensor& rhs, const HostTensor& out, std::span<const DotPostOp> post_ops,
                 EvalArgs& args) {
  if (DotPlan* plan = args.cache().Find<DotPlan>(key)) {
    WEFT_INTERNAL_CHECK(plan->post_ops.size() == post_ops.size(),
                        "dot '{}': cached plan has {} post-ops, the run {}", instr.name(),
                        plan->post_ops.size(), post_ops.size());
    return *plan;
  }
  auto plan = std::make_shared<DotPlan>();
  plan->layout = compiler::PlanDotLayout(instr.attrs().dot, lhs.dimensions(), rhs.dimensions());
  plan->weft_gemm = RunsOnWeftGemm(plan->layout, lhs, rhs, out, post_ops);
  for (const DotPostOp& p : post_ops) plan->post_ops.push_back(p.op);
  return args.cache().Put(key, std::move(plan));
}

// A float dot: the plan's GEMM into `out` (through an f32 result when the
// plan computes in f32 and `out` is not f32).
void FloatDot(const HloInstruction& instr, const HloInstruction& key, const HostTensor& lhs,
              const HostTensor& rhs, std::span<const DotPostOp> post_ops, HostTensor& out,
              EvalArgs& args) {
  const DotDimensionNumbers& dn = instr.attrs().dot;
  DotPlan& plan = PlanFor(instr, key, lhs, rhs, out, post_ops, args);
  const compiler::DotGroups& g = plan.layout.groups;
  if (g.k == 0) return ZeroResult(out, post_ops);
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  if (plan.weft_gemm) return WeftGemm(plan.layout, lhs, rhs, out);
  const bool bf16_allowed = kernels::simd::Bf16InstructionsAllowed();
  if (!plan.stream || plan.bf16_allowed != bf16_allowed) MakePrimitive(instr, plan, bf16_allowed);
  const PrimitiveType f32 = PrimitiveType::kF32;
  HostTensor result = plan.bf16 || out.element_type() == f32
                          ? out
                          : args.ctx().Allocate(out.shape().WithElementType(f32));
  const HostTensor a = GemmOperand(lhs, plan.bf16, plan.pack_lhs, dn.lhs_batch_dims, g.lhs_free,
                                   dn.lhs_contracting_dims, args);
  const HostTensor b = GemmOperand(rhs, plan.bf16, plan.pack_rhs, dn.rhs_batch_dims,
                                   dn.rhs_contracting_dims, g.rhs_free, args);
  Execute(plan, a, b, result.mutable_raw_data(), post_ops, g);
  if (result.raw_data() != out.raw_data()) {
    ConvertElements(f32, result.raw_data(), out.element_type(), out.mutable_raw_data(),
                    out.element_count());
  }
}

// An integer dot (int64 accumulation, wrapped to the result type).
void IntegerDot(const HloInstruction& instr, const HostTensor& lhs, const HostTensor& rhs,
                HostTensor& out, EvalArgs& args) {
  const DotDimensionNumbers& dn = instr.attrs().dot;
  const compiler::DotGroups g = compiler::GroupsOf(dn, lhs.dimensions(), rhs.dimensions());
  const PrimitiveType t = out.element_type();
  MatrixOperand a =
      AsMatrices(lhs, t, dn.lhs_batch_dims, g.lhs_free, dn.lhs_contracting_dims, args);
  MatrixOperand b =
      AsMatrices(rhs, t, dn.rhs_batch_dims, dn.rhs_contracting_dims, g.rhs_free, args);
  switch (t) {
    case PrimitiveType::kS32:
      IntegerGemm(static_cast<const int32_t*>(a.data), a.transposed,
                  static_cast<const int32_t*>(b.data), b.transposed, out.mutable_data<int32_t>(),
                  g.batch, g.m, g.n, g.k);
      break;
    case PrimitiveType::kS64:
      IntegerGemm(static_cast<const int64_t*>(a.data), a.transposed,
                  static_cast<const int64_t*>(b.data), b.transposed, out.mutable_data<int64_t>(),
                  g.batch, g.m, g.n, g.k);
      break;
    default:
      IntegerGemm(static_cast<const uint32_t*>(a.data), a.transposed,
                  static_cast<const uint32_t*>(b.data), b.transposed, out.mutable_data<uint32_t>(),
                  g.batch, g.m, g.n, g.k);
  }
}

}  // namespace

Value RunDot(const HloInstruction& instr, const HloInstruction& key, const HostTensor& lhs,
             const HostTensor& rhs, std::span<const DotPostOp> post_ops, EvalArgs& args) {
  for (const DotPostOp& p : post_ops) {
    WEFT_INTERNAL_CHECK(instr.shape().element_type() == PrimitiveType::kF32 &&
                            lhs.element_type() == PrimitiveType::kF32 &&
                            rhs.element_type() == PrimitiveType::kF32 &&
                            (p.op == HloOpcode::kAdd || p.op == HloOpcode::kMultiply) &&
                            p.src1 != nullptr && p.src1->element_type() == PrimitiveType::kF32 &&
                            p.src1->dimensions() == instr.shape().dimensions(),
                        "dot '{}': a post-op must be an f32 add or multiply by a value of the "
                        "dot's shape, after a dot of f32 operands",
                        instr.name());
  }
  HostTensor out = args.ctx().Allocate(instr.shape());
  if (IsFloatingPoint(out.element_type())) {
    FloatDot(instr, key, lhs, rhs, post_ops, out, args);
  } else {
    IntegerDot(instr, lhs, rhs, out, args);
  }
  return Value{std::move(out)};
}

Value EvalDot(const HloInstruction& instr, EvalArgs& args) {
  return RunDot(instr, instr, args.array(0), args.array(1), {}, args);
}

}  // namespace weft::runtime::exec
