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
// buffer assignment reserves their scratch by. The primitive (and the plan
// of which operand is packed) is made once per instruction and kept in the
// executor's InstructionCache. An output fusion (fusion kind=kOutput,
// eval_fusion.cc) runs its dot through the same RunDot with a oneDNN binary
// post-op (add or mul) per step of its chain, src1 being the step's other
// operand in the dense [batch, M, N] layout of the dot's result; its plan is
// cached under the fusion instruction, with the post-ops in the primitive's
// attributes. The result is [batch, M, N], which is XLA's
// dot output order (batch dims, lhs free dims, rhs free dims). bf16/f16
// operands compute in f32 (converted copies, same layout); integer dots
// accumulate in int64.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <unordered_map>

#include "weft/base/error.h"
#include "weft/compiler/dot_layout.h"
#include "weft/runtime/executor_eval.h"

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

// What one dot instruction keeps across runs: which operands are packed
// before the GEMM, their memory descriptors, and the matmul primitive.
struct DotPlan {
  bool pack_lhs = false, pack_rhs = false;
  dnnl::memory::desc lhs_md, rhs_md, out_md;
  std::vector<HloOpcode> post_ops;  // binary post-ops (src1 laid out as out_md)
  dnnl::matmul primitive;
  std::optional<dnnl::stream> stream;
};

dnnl::memory::desc Desc(const compiler::MatrixView& v) {
  return dnnl::memory::desc({v.batch, v.rows, v.cols}, dnnl::memory::data_type::f32,
                            {v.batch_stride, v.row_stride, v.col_stride});
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

// The matmul primitive for `instr` (f32 compute), made on its first run:
// the operands compiler::PlanDotLayout says are read in place are, unless
// oneDNN has no kernel for their strides (then both are packed; the
// compiler reserved scratch for that where DotLayout::may_pack_both).
// `key` is the instruction the plan is kept under: the dot itself, or the
// output fusion holding it (whose post-ops are part of the primitive).
DotPlan& PlanFor(const HloInstruction& instr, const HloInstruction& key,
                 const compiler::DotLayout& layout, std::span<const DotPostOp> post_ops,
                 EvalArgs& args) {
  if (DotPlan* plan = args.cache().Find<DotPlan>(key)) {
    WEFT_INTERNAL_CHECK(plan->post_ops.size() == post_ops.size(),
                        "dot '{}': cached plan has {} post-ops, the run {}", instr.name(),
                        plan->post_ops.size(), post_ops.size());
    return *plan;
  }
  const compiler::DotGroups& g = layout.groups;
  auto plan = std::make_shared<DotPlan>();
  for (const DotPostOp& p : post_ops) plan->post_ops.push_back(p.op);
  auto make = [&](const compiler::MatrixView& l, const compiler::MatrixView& r) {
    plan->lhs_md = Desc(l);
    plan->rhs_md = Desc(r);
    plan->out_md = Desc(compiler::PackedMatrices(g.batch, g.m, g.n));
    dnnl::post_ops ops;
    for (HloOpcode op : plan->post_ops) {
      ops.append_binary(op == HloOpcode::kAdd ? dnnl::algorithm::binary_add
                                              : dnnl::algorithm::binary_mul,
                        plan->out_md);
    }
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(plan->lhs_md, plan->rhs_md, plan->out_md),
                                    attr, CpuEngine());
    plan->primitive = dnnl::matmul(pd);
  };
  plan->pack_lhs = layout.pack_lhs();
  plan->pack_rhs = layout.pack_rhs();
  try {
    make(layout.lhs ? *layout.lhs : compiler::PackedMatrices(g.batch, g.m, g.k),
         layout.rhs ? *layout.rhs : compiler::PackedMatrices(g.batch, g.k, g.n));
  } catch (const dnnl::error&) {
    // Strides oneDNN has no kernel for: read both operands packed.
    WEFT_INTERNAL_CHECK(layout.may_pack_both,
                        "oneDNN refused the dense operand layouts of dot '{}'", instr.name());
    plan->pack_lhs = plan->pack_rhs = true;
    make(compiler::PackedMatrices(g.batch, g.m, g.k), compiler::PackedMatrices(g.batch, g.k, g.n));
  }
  plan->stream.emplace(CpuEngine());
  return args.cache().Put(key, std::move(plan));
}

// `x` as f32 (a converted copy when it is not), in its own layout.
HostTensor AsF32(const HostTensor& x, EvalArgs& args) {
  if (x.element_type() == PrimitiveType::kF32) return x;
  HostTensor out = args.ctx().Allocate(x.shape().WithElementType(PrimitiveType::kF32));
  ConvertElements(x.element_type(), x.raw_data(), PrimitiveType::kF32, out.mutable_raw_data(),
                  x.element_count());
  return out;
}

// `x` (f32) transposed into packed [batch, rows, cols] order.
HostTensor Packed(const HostTensor& x, const std::vector<int64_t>& batch,
                  const std::vector<int64_t>& rows, const std::vector<int64_t>& cols,
                  EvalArgs& args) {
  HostTensor packed = args.ctx().Allocate(x.shape());
  TransposeBytes(x.raw_data(), x.dimensions(), Concat({&batch, &rows, &cols}), 4,
                 packed.mutable_raw_data());
  return packed;
}

}  // namespace

Value RunDot(const HloInstruction& instr, const HloInstruction& key, const HostTensor& lhs,
             const HostTensor& rhs, std::span<const DotPostOp> post_ops, EvalArgs& args) {
  for (const DotPostOp& p : post_ops) {
    WEFT_INTERNAL_CHECK(instr.shape().element_type() == PrimitiveType::kF32 &&
                            (p.op == HloOpcode::kAdd || p.op == HloOpcode::kMultiply) &&
                            p.src1 != nullptr &&
                            p.src1->element_type() == PrimitiveType::kF32 &&
                            p.src1->dimensions() == instr.shape().dimensions(),
                        "dot '{}': a post-op must be an f32 add or multiply by a value of the "
                        "dot's shape",
                        instr.name());
  }
  const DotDimensionNumbers& dn = instr.attrs().dot;
  const compiler::DotLayout layout =
      compiler::PlanDotLayout(dn, lhs.dimensions(), rhs.dimensions());
  const compiler::DotGroups& g = layout.groups;
  const int64_t batch = g.batch, m = g.m, k = g.k, n = g.n;
  const PrimitiveType out_type = instr.shape().element_type();
  HostTensor out = args.ctx().Allocate(instr.shape());

  if (!IsFloatingPoint(out_type)) {
    const PrimitiveType t = out_type;
    MatrixOperand a =
        AsMatrices(lhs, t, dn.lhs_batch_dims, g.lhs_free, dn.lhs_contracting_dims, args);
    MatrixOperand b =
        AsMatrices(rhs, t, dn.rhs_batch_dims, dn.rhs_contracting_dims, g.rhs_free, args);
    switch (t) {
      case PrimitiveType::kS32:
        IntegerGemm(static_cast<const int32_t*>(a.data), a.transposed,
                    static_cast<const int32_t*>(b.data), b.transposed, out.mutable_data<int32_t>(),
                    batch, m, n, k);
        break;
      case PrimitiveType::kS64:
        IntegerGemm(static_cast<const int64_t*>(a.data), a.transposed,
                    static_cast<const int64_t*>(b.data), b.transposed, out.mutable_data<int64_t>(),
                    batch, m, n, k);
        break;
      default:
        IntegerGemm(static_cast<const uint32_t*>(a.data), a.transposed,
                    static_cast<const uint32_t*>(b.data), b.transposed,
                    out.mutable_data<uint32_t>(), batch, m, n, k);
    }
    return Value{std::move(out)};
  }

  const PrimitiveType f32 = PrimitiveType::kF32;
  HostTensor result =
      out_type == f32 ? out : args.ctx().Allocate(instr.shape().WithElementType(f32));
  float* c = result.mutable_data<float>();
  if (k == 0) {
    // Nothing to contract: zeros, then the post-ops as the unfused ops would.
    std::memset(c, 0, static_cast<size_t>(result.byte_size()));
    for (const DotPostOp& p : post_ops) {
      const float* s1 = p.src1->data<float>();
      for (int64_t i = 0; i < result.element_count(); ++i) {
        c[i] = p.op == HloOpcode::kAdd ? c[i] + s1[i] : c[i] * s1[i];
      }
    }
  } else if (m > 0 && n > 0 && batch > 0) {
    DotPlan& plan = PlanFor(instr, key, layout, post_ops, args);
    HostTensor a = AsF32(lhs, args);
    HostTensor b = AsF32(rhs, args);
    if (plan.pack_lhs) a = Packed(a, dn.lhs_batch_dims, g.lhs_free, dn.lhs_contracting_dims, args);
    if (plan.pack_rhs) b = Packed(b, dn.rhs_batch_dims, dn.rhs_contracting_dims, g.rhs_free, args);
    const dnnl::engine& engine = CpuEngine();
    dnnl::memory a_mem(plan.lhs_md, engine, const_cast<void*>(a.raw_data()));
    dnnl::memory b_mem(plan.rhs_md, engine, const_cast<void*>(b.raw_data()));
    dnnl::memory c_mem(plan.out_md, engine, c);
    std::unordered_map<int, dnnl::memory> exec_args{
        {DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
    for (size_t i = 0; i < post_ops.size(); ++i) {
      exec_args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1,
                        dnnl::memory(plan.out_md, engine,
                                     const_cast<void*>(post_ops[i].src1->raw_data())));
    }
    try {
      plan.primitive.execute(*plan.stream, exec_args);
      plan.stream->wait();
    } catch (const dnnl::error& e) {
      throw InternalError(fmt::format("oneDNN matmul failed ({}) for [{},{},{}] x [{},{},{}]",
                                      e.what(), batch, m, k, batch, k, n));
    }
  }
  if (out_type != f32) {
    ConvertElements(f32, c, out_type, out.mutable_raw_data(), out.element_count());
  }
  return Value{std::move(out)};
}

Value EvalDot(const HloInstruction& instr, EvalArgs& args) {
  return RunDot(instr, instr, args.array(0), args.array(1), {}, args);
}

}  // namespace weft::runtime::exec
