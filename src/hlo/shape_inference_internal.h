// Internal to shape inference (shape_inference.cc, which dispatches on the
// opcode): the checks every rule uses, and the rules that live in files of
// their own.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/hlo/instruction.h"

namespace weft::hlo {

using Dims = std::vector<int64_t>;

// `{d0,d1,...}`, as messages print a list of dims.
std::string DimsString(std::span<const int64_t> dims);
// Throws unless `instr` has `n` operands.
void ExpectOperandCount(const HloInstruction& instr, int64_t n);
// Operand `i`'s shape, which must be an array.
const Shape& ArrayOperand(const HloInstruction& instr, int64_t i);
// `dims` are distinct and in [0, rank); `sorted` also requires increasing.
void CheckDims(std::span<const int64_t> dims, int64_t rank, std::string_view what,
               bool sorted = false);
// The declared result shape, which must be given (`what` says why).
const Shape& Declared(const HloInstruction& instr, std::string_view what);
// Throws unless `s` is an integer scalar.
void CheckScalarInt(const Shape& s, std::string_view what);
// `c` takes 2n scalar parameters of the accumulators' types and returns them
// (a tuple when n > 1): reduce's and scatter's combiners. kAnyFloat: a
// floating accumulator may be taken and returned in another floating type
// (XLA's reducer check ignores floating precision; scatter's result keeps
// its operand's type, the combined value rounded to it).
enum class ReducerPrecision { kExact, kAnyFloat };
void CheckScalarComputation(const HloComputation* c, std::span<const PrimitiveType> accumulators,
                            std::string_view what,
                            ReducerPrecision precision = ReducerPrecision::kExact);

// gather(operand, indices) and scatter(operands..., indices, updates...)
// (shape_inference_gather_scatter.cc).
Shape InferGather(const HloInstruction& instr);
Shape InferScatter(const HloInstruction& instr);
// all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute
// (shape_inference_collective.cc).
Shape InferCollective(const HloInstruction& instr);
// bitcast-convert, sort, topk, reduce-window, select-and-scatter
// (shape_inference_dimwise.cc).
Shape InferBitcastConvert(const HloInstruction& instr);
Shape InferSort(const HloInstruction& instr);
Shape InferTopK(const HloInstruction& instr);
Shape InferCholesky(const HloInstruction& instr);
Shape InferTriangularSolve(const HloInstruction& instr);
Shape InferReduceWindow(const HloInstruction& instr);
Shape InferSelectAndScatter(const HloInstruction& instr);

// rng(a, b), distribution=...: scalars a, b of the declared result's type
// (and a tile's starts, RngTileOf).
Shape InferRng(const HloInstruction& instr);
// rng-bit-generator(state): (state, bits), state u64[2] (u64[3] for philox)
// (and a tile's starts, RngTileOf).
Shape InferRngBitGenerator(const HloInstruction& instr);
// convolution(lhs, rhs), window=, dim_labels=, feature_group_count=,
// batch_group_count= (shape_inference_convolution.cc).
Shape InferConvolution(const HloInstruction& instr);
// The number of positions a window dim takes over a base of `base` elements
// (XLA's window output size; padding may be negative, 0 when the padded,
// dilated base is shorter than the dilated window).
int64_t WindowOutputSize(int64_t base, const WindowDim& w);

}  // namespace weft::hlo
