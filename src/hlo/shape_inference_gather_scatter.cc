// Shape rules of gather and scatter (XLA's dimension numbers, operand and
// input batching dims included; a variadic scatter's operands and updates).
#include "shape_inference_internal.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"
#include "weft/hlo/computation.h"

namespace weft::hlo {
namespace {

// Splits `indices` into its batch dims and the index vector size.
std::pair<Dims, int64_t> IndexBatch(const Shape& indices, int64_t index_vector_dim,
                                    std::string_view op) {
  WEFT_CHECK(index_vector_dim >= 0 && index_vector_dim <= indices.rank(),
             "{} index_vector_dim {} out of range for indices {}", op, index_vector_dim,
             indices.ToString());
  WEFT_CHECK(IsInteger(indices.element_type()), "{} indices must be integers, got {}", op,
             indices.ToString());
  Dims batch;
  for (int64_t d = 0; d < indices.rank(); ++d) {
    if (d != index_vector_dim) batch.push_back(indices.dimensions(d));
  }
  const int64_t vector_size =
      index_vector_dim < indices.rank() ? indices.dimensions(index_vector_dim) : 1;
  return {batch, vector_size};
}

}  // namespace

Shape InferGather(const HloInstruction& instr) {
  ExpectOperandCount(instr, 2);
  const Shape& operand = ArrayOperand(instr, 0);
  const Shape& indices = ArrayOperand(instr, 1);
  const GatherDimensionNumbers& g = instr.attrs().gather;
  const Dims& sizes = instr.attrs().gather_slice_sizes;
  auto [batch, vector_size] = IndexBatch(indices, g.index_vector_dim, "gather");
  WEFT_CHECK(static_cast<int64_t>(g.start_index_map.size()) == vector_size,
             "gather start_index_map {} must have one entry per index vector element ({})",
             DimsString(g.start_index_map), vector_size);
  CheckDims(g.start_index_map, operand.rank(), "gather start_index_map");
  CheckDims(g.collapsed_slice_dims, operand.rank(), "gather collapsed_slice_dims", true);
  CheckDims(g.operand_batching_dims, operand.rank(), "gather operand_batching_dims", true);
  WEFT_CHECK(g.operand_batching_dims.size() == g.start_indices_batching_dims.size(),
             "gather operand_batching_dims and start_indices_batching_dims differ in length");
  WEFT_CHECK(static_cast<int64_t>(sizes.size()) == operand.rank(),
             "gather slice_sizes {} must have one entry per operand dim ({})", DimsString(sizes),
             operand.rank());
  for (int64_t d = 0; d < operand.rank(); ++d) {
    WEFT_CHECK(sizes[d] >= 0 && sizes[d] <= operand.dimensions(d),
               "gather slice_sizes[{}] = {} exceeds operand dim {}", d, sizes[d],
               operand.dimensions(d));
    if (Contains(g.collapsed_slice_dims, d) || Contains(g.operand_batching_dims, d)) {
      WEFT_CHECK(sizes[d] <= 1, "gather collapses dim {} whose slice size is {}, not 1", d,
                 sizes[d]);
      WEFT_CHECK(!(Contains(g.collapsed_slice_dims, d) && Contains(g.operand_batching_dims, d)),
                 "gather dim {} is both collapsed and batching", d);
    }
  }
  Dims offsets;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (!Contains(g.collapsed_slice_dims, d) && !Contains(g.operand_batching_dims, d)) {
      offsets.push_back(sizes[d]);
    }
  }
  WEFT_CHECK(offsets.size() == g.offset_dims.size(),
             "gather offset_dims {} must have one entry per uncollapsed operand dim ({})",
             DimsString(g.offset_dims), offsets.size());
  const int64_t out_rank = static_cast<int64_t>(batch.size() + offsets.size());
  CheckDims(g.offset_dims, out_rank, "gather offset_dims", true);
  Dims out;
  size_t next_offset = 0, next_batch = 0;
  for (int64_t d = 0; d < out_rank; ++d) {
    out.push_back(Contains(g.offset_dims, d) ? offsets[next_offset++] : batch[next_batch++]);
  }
  return Shape(operand.element_type(), out);
}

// scatter(operands..., indices, updates...): N operands of one shape, N
// updates of one shape, each update of its operand's element type; the
// combiner takes N accumulators and N updates; N > 1 returns a tuple.
Shape InferScatter(const HloInstruction& instr) {
  WEFT_CHECK(instr.operand_count() >= 3 && instr.operand_count() % 2 == 1,
             "scatter takes N operands, the indices, then N updates; got {} operands",
             instr.operand_count());
  const int64_t n = (instr.operand_count() - 1) / 2;
  const Shape& operand = ArrayOperand(instr, 0);
  const Shape& indices = ArrayOperand(instr, n);
  const Shape& updates = ArrayOperand(instr, n + 1);
  const ScatterDimensionNumbers& s = instr.attrs().scatter;
  std::vector<PrimitiveType> types;
  std::vector<Shape> results;
  for (int64_t i = 0; i < n; ++i) {
    const Shape& op = ArrayOperand(instr, i);
    const Shape& up = ArrayOperand(instr, n + 1 + i);
    WEFT_CHECK(op.dimensions() == operand.dimensions() && up.dimensions() == updates.dimensions(),
               "scatter operand {} {} and updates {} must have the dims of operand 0 {} and "
               "updates 0 {}",
               i, op.ToString(), up.ToString(), operand.ToString(), updates.ToString());
    WEFT_CHECK(up.element_type() == op.element_type(),
               "scatter updates {} must have the operand's element type {}", up.ToString(),
               PrimitiveTypeName(op.element_type()));
    types.push_back(op.element_type());
    results.push_back(op);
  }
  auto [batch, vector_size] = IndexBatch(indices, s.index_vector_dim, "scatter");
  WEFT_CHECK(static_cast<int64_t>(s.scatter_dims_to_operand_dims.size()) == vector_size,
             "scatter_dims_to_operand_dims {} must have one entry per index vector element ({})",
             DimsString(s.scatter_dims_to_operand_dims), vector_size);
  CheckDims(s.scatter_dims_to_operand_dims, operand.rank(), "scatter_dims_to_operand_dims");
  CheckDims(s.inserted_window_dims, operand.rank(), "scatter inserted_window_dims", true);
  CheckDims(s.input_batching_dims, operand.rank(), "scatter input_batching_dims", true);
  CheckDims(s.update_window_dims, updates.rank(), "scatter update_window_dims", true);
  WEFT_CHECK(static_cast<int64_t>(s.update_window_dims.size() + s.inserted_window_dims.size() +
                                  s.input_batching_dims.size()) == operand.rank(),
             "scatter window dims ({} update + {} inserted + {} batching) must add up to the "
             "operand rank {}",
             s.update_window_dims.size(), s.inserted_window_dims.size(),
             s.input_batching_dims.size(), operand.rank());
  WEFT_CHECK(updates.rank() == static_cast<int64_t>(batch.size() + s.update_window_dims.size()),
             "scatter updates {} must have rank {} ({} index batch dims + {} window dims)",
             updates.ToString(), batch.size() + s.update_window_dims.size(), batch.size(),
             s.update_window_dims.size());
  size_t next_window = 0, next_batch = 0;
  Dims window_operand_dims;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (!Contains(s.inserted_window_dims, d) && !Contains(s.input_batching_dims, d)) {
      window_operand_dims.push_back(d);
    }
  }
  for (int64_t d = 0; d < updates.rank(); ++d) {
    if (Contains(s.update_window_dims, d)) {
      const int64_t od = window_operand_dims[next_window++];
      WEFT_CHECK(updates.dimensions(d) <= operand.dimensions(od),
                 "scatter update window dim {} ({}) exceeds operand dim {} ({})", d,
                 updates.dimensions(d), od, operand.dimensions(od));
    } else {
      WEFT_CHECK(updates.dimensions(d) == batch[next_batch],
                 "scatter updates dim {} is {} but the matching index batch dim is {}", d,
                 updates.dimensions(d), batch[next_batch]);
      ++next_batch;
    }
  }
  CheckScalarComputation(instr.called_computations().empty() ? nullptr : instr.to_apply(), types,
                         "scatter", ReducerPrecision::kAnyFloat);
  return n == 1 ? operand : Shape::Tuple(results);
}

}  // namespace weft::hlo
