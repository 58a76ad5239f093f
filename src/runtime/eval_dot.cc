// dot with general dimension numbers: each operand is viewed as a batch of
// matrices — lhs [batch, M, K], rhs [batch, K, N] — and multiplied with
// oneDNN's sgemm. An operand already laid out that way (or as its
// transpose, [batch, K, M] / [batch, N, K]) is used in place; otherwise it
// is transposed into that order first. The result is [batch, M, N], which
// is XLA's dot output order (batch dims, lhs free dims, rhs free dims).
// bf16/f16 operands compute in f32; integer dots accumulate in int64.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstring>

#include "weft/base/error.h"
#include "weft/runtime/executor_eval.h"

namespace weft::runtime::exec {
namespace {

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// True when reading dims in `order` visits memory in row-major order
// (size-1 dims may sit anywhere).
bool IsInOrder(const std::vector<int64_t>& order, const std::vector<int64_t>& dims) {
  int64_t last = -1;
  for (int64_t d : order) {
    if (dims[d] == 1) continue;
    if (d < last) return false;
    last = d;
  }
  return true;
}

std::vector<int64_t> Concat(std::initializer_list<const std::vector<int64_t>*> parts) {
  std::vector<int64_t> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

int64_t Product(const std::vector<int64_t>& dims, const std::vector<int64_t>& which) {
  int64_t n = 1;
  for (int64_t d : which) n *= dims[d];
  return n;
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
  if (IsInOrder(Concat({&batch, &rows, &cols}), dims)) {
    m.data = src.raw_data();
  } else if (IsInOrder(Concat({&batch, &cols, &rows}), dims)) {
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

Value EvalDot(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& lhs = args.array(0);
  const HostTensor& rhs = args.array(1);
  const DotDimensionNumbers& dn = instr.attrs().dot;
  std::vector<int64_t> lhs_free, rhs_free;
  for (int64_t d = 0; d < lhs.rank(); ++d) {
    if (!Contains(dn.lhs_batch_dims, d) && !Contains(dn.lhs_contracting_dims, d)) {
      lhs_free.push_back(d);
    }
  }
  for (int64_t d = 0; d < rhs.rank(); ++d) {
    if (!Contains(dn.rhs_batch_dims, d) && !Contains(dn.rhs_contracting_dims, d)) {
      rhs_free.push_back(d);
    }
  }
  const int64_t batch = Product(lhs.dimensions(), dn.lhs_batch_dims);
  const int64_t m = Product(lhs.dimensions(), lhs_free);
  const int64_t k = Product(lhs.dimensions(), dn.lhs_contracting_dims);
  const int64_t n = Product(rhs.dimensions(), rhs_free);
  const PrimitiveType out_type = instr.shape().element_type();
  HostTensor out = args.ctx().Allocate(instr.shape());

  if (!IsFloatingPoint(out_type)) {
    const PrimitiveType t = out_type;
    MatrixOperand a = AsMatrices(lhs, t, dn.lhs_batch_dims, lhs_free, dn.lhs_contracting_dims, args);
    MatrixOperand b = AsMatrices(rhs, t, dn.rhs_batch_dims, dn.rhs_contracting_dims, rhs_free, args);
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
  MatrixOperand a = AsMatrices(lhs, f32, dn.lhs_batch_dims, lhs_free, dn.lhs_contracting_dims, args);
  MatrixOperand b = AsMatrices(rhs, f32, dn.rhs_batch_dims, dn.rhs_contracting_dims, rhs_free, args);
  HostTensor result = out_type == f32 ? out : args.ctx().Allocate(instr.shape().WithElementType(f32));
  float* c = result.mutable_data<float>();
  if (k == 0) {
    std::memset(c, 0, static_cast<size_t>(result.byte_size()));
  } else if (m > 0 && n > 0) {
    const float* ap = static_cast<const float*>(a.data);
    const float* bp = static_cast<const float*>(b.data);
    for (int64_t p = 0; p < batch; ++p) {
      const dnnl_status_t status =
          dnnl_sgemm(a.transposed ? 'T' : 'N', b.transposed ? 'T' : 'N', m, n, k, 1.0f,
                     ap + p * m * k, a.transposed ? m : k, bp + p * k * n, b.transposed ? k : n,
                     0.0f, c + p * m * n, n);
      WEFT_CHECK(status == dnnl_success, "oneDNN sgemm failed with status {} for [{}x{}] x [{}x{}]",
                 static_cast<int>(status), m, k, k, n);
    }
  }
  if (out_type != f32) {
    ConvertElements(f32, c, out_type, out.mutable_raw_data(), out.element_count());
  }
  return Value{std::move(out)};
}

}  // namespace weft::runtime::exec
