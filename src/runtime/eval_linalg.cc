// cholesky and triangular-solve (XLA's): each matrix of the batch (the
// last two dims) on its own, computed in double from the operands' values
// and rounded once into the element type.
//
// cholesky(a), lower=L: the factor of a = l l^T (lower) or a = u^T u
// (upper), reading only a's lower (upper) triangle; the other triangle of
// the result is zero (XLA leaves it to the implementation). A matrix that is
// not positive definite gives NaN from the first pivot that is not > 0 on,
// as in LAPACK's potrf the factor is undefined there.
//
// triangular-solve(a, b): x with op(a) x = b (left_side) or x op(a) = b,
// op(a) = a or a^T (transpose_a; ADJOINT is the transpose of a real
// matrix), a read from its lower (lower=true) or upper triangle only, its
// diagonal taken as ones under unit_diagonal. Substitution in the order that
// makes every step read solved entries only.
#include <cmath>
#include <limits>
#include <vector>

#include "executor_eval.h"
#include "weft/base/error.h"

namespace weft::runtime::exec {
namespace {

// Matrices of the batch and the size of one.
struct Batch {
  int64_t count = 1, rows = 0, cols = 0;
};

Batch BatchOf(const Shape& s) {
  Batch b;
  const int64_t r = s.rank();
  for (int64_t d = 0; d + 2 < r; ++d) b.count *= s.dimensions(d);
  b.rows = s.dimensions(r - 2);
  b.cols = s.dimensions(r - 1);
  return b;
}

std::vector<double> LoadMatrix(const HostTensor& t, int64_t first, int64_t n) {
  std::vector<double> m(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) m[i] = LoadAsDouble(t.element_type(), t.raw_data(), first + i);
  return m;
}

void StoreMatrix(HostTensor& t, int64_t first, const std::vector<double>& m) {
  for (size_t i = 0; i < m.size(); ++i) {
    StoreDouble(t.element_type(), t.mutable_raw_data(), first + static_cast<int64_t>(i), m[i]);
  }
}

}  // namespace

void CheckLinalg(const HloInstruction& instr) {
  const PrimitiveType t = instr.operand(0)->shape().element_type();
  WEFT_CHECK(IsFloatingPoint(t) && t != PrimitiveType::kC64,
             "{} of {} is not supported (real floats only)", HloOpcodeString(instr.opcode()),
             PrimitiveTypeName(t));
}

Value EvalCholesky(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& a = args.array(0);
  HostTensor out = args.ctx().Allocate(instr.shape());
  const Batch batch = BatchOf(a.shape());
  const int64_t n = batch.rows;
  const bool lower = instr.attrs().lower;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t k = 0; k < batch.count; ++k) {
    const std::vector<double> m = LoadMatrix(a, k * n * n, n * n);
    // The factor as lower l (a = l l^T); upper is its transpose, read from
    // a's upper triangle (a's (i, j) with i <= j is l's (j, i)).
    auto in = [&](int64_t i, int64_t j) { return lower ? m[i * n + j] : m[j * n + i]; };
    std::vector<double> l(static_cast<size_t>(n * n), 0.0);
    bool broken = false;
    for (int64_t j = 0; j < n; ++j) {
      double d = in(j, j);
      for (int64_t p = 0; p < j; ++p) d -= l[j * n + p] * l[j * n + p];
      broken = broken || !(d > 0);
      const double pivot = broken ? nan : std::sqrt(d);
      l[j * n + j] = pivot;
      for (int64_t i = j + 1; i < n; ++i) {
        double s = in(i, j);
        for (int64_t p = 0; p < j; ++p) s -= l[i * n + p] * l[j * n + p];
        l[i * n + j] = s / pivot;
      }
    }
    if (!lower) {
      std::vector<double> u(static_cast<size_t>(n * n), 0.0);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j <= i; ++j) u[j * n + i] = l[i * n + j];
      }
      l = std::move(u);
    }
    StoreMatrix(out, k * n * n, l);
  }
  return Value{std::move(out)};
}

Value EvalTriangularSolve(const HloInstruction& instr, EvalArgs& args) {
  const HostTensor& a_t = args.array(0);
  const HostTensor& b_t = args.array(1);
  HostTensor out = args.ctx().Allocate(instr.shape());
  const HloAttributes& attrs = instr.attrs();
  const Batch ab = BatchOf(a_t.shape());
  const Batch bb = BatchOf(b_t.shape());
  const int64_t m = ab.rows;
  const bool transpose = attrs.transpose_a != TriangularTranspose::kNoTranspose;
  // op(a) is lower triangular when a is lower and not transposed, or upper
  // and transposed.
  const bool op_lower = attrs.lower != transpose;
  for (int64_t k = 0; k < ab.count; ++k) {
    const std::vector<double> a = LoadMatrix(a_t, k * m * m, m * m);
    std::vector<double> x = LoadMatrix(b_t, k * bb.rows * bb.cols, bb.rows * bb.cols);
    // op(a)'s (i, j), reading only a's stored triangle.
    auto op = [&](int64_t i, int64_t j) {
      if (i == j) return attrs.unit_diagonal ? 1.0 : a[i * m + i];
      const bool in_lower = op_lower ? i > j : i < j;
      if (!in_lower) return 0.0;
      return transpose ? a[j * m + i] : a[i * m + j];
    };
    if (attrs.left_side) {
      // op(a) x = b, column by column of x ([m, n]).
      const int64_t n = bb.cols;
      for (int64_t c = 0; c < n; ++c) {
        for (int64_t s = 0; s < m; ++s) {
          const int64_t i = op_lower ? s : m - 1 - s;
          double v = x[i * n + c];
          for (int64_t t = 0; t < s; ++t) {
            const int64_t j = op_lower ? t : m - 1 - t;
            v -= op(i, j) * x[j * n + c];
          }
          x[i * n + c] = v / op(i, i);
        }
      }
    } else {
      // x op(a) = b, row by row of x ([n, m]): x[r, j] op(a)[j, i] summed
      // over j gives b[r, i]; op(a)[j, i] is nonzero for j >= i (lower) or
      // j <= i (upper), so lower solves from the last column back.
      const int64_t n = bb.rows;
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t s = 0; s < m; ++s) {
          const int64_t i = op_lower ? m - 1 - s : s;
          double v = x[r * m + i];
          for (int64_t t = 0; t < s; ++t) {
            const int64_t j = op_lower ? m - 1 - t : t;
            v -= x[r * m + j] * op(j, i);
          }
          x[r * m + i] = v / op(i, i);
        }
      }
    }
    StoreMatrix(out, k * bb.rows * bb.cols, x);
  }
  return Value{std::move(out)};
}

}  // namespace weft::runtime::exec
