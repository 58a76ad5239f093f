// Which attributes each opcode accepts and requires (opcode_attributes.h).
#include "opcode_attributes.h"

namespace weft::hlo {

using Op = HloOpcode;

const std::map<std::string_view, std::vector<Op>>& AttributeOpcodes() {
  static const auto* table = new std::map<std::string_view, std::vector<Op>>{
      {"dimensions",
       {Op::kBroadcast, Op::kTranspose, Op::kReverse, Op::kReduce, Op::kConcatenate, Op::kAllGather,
        Op::kReduceScatter, Op::kAllToAll, Op::kSort}},
      {"is_stable", {Op::kSort}},
      {"k", {Op::kTopK}},
      {"largest", {Op::kTopK}},
      {"lower", {Op::kCholesky, Op::kTriangularSolve}},
      {"left_side", {Op::kTriangularSolve}},
      {"unit_diagonal", {Op::kTriangularSolve}},
      {"transpose_a", {Op::kTriangularSolve}},
      {"window", {Op::kReduceWindow, Op::kSelectAndScatter, Op::kConvolution}},
      {"dim_labels", {Op::kConvolution}},
      {"feature_group_count", {Op::kConvolution}},
      {"batch_group_count", {Op::kConvolution}},
      {"select", {Op::kSelectAndScatter}},
      {"scatter", {Op::kSelectAndScatter}},
      {"true_computation", {Op::kConditional}},
      {"false_computation", {Op::kConditional}},
      {"branch_computations", {Op::kConditional}},
      {"infeed_config", {Op::kInfeed}},
      {"outfeed_config", {Op::kOutfeed}},
      {"outfeed_shape", {Op::kOutfeed}},
      {"iota_dimension", {Op::kIota}},
      {"index", {Op::kGetTupleElement}},
      {"slice", {Op::kSlice}},
      {"dynamic_slice_sizes", {Op::kDynamicSlice}},
      {"padding", {Op::kPad}},
      {"direction", {Op::kCompare}},
      {"type", {Op::kCompare}},
      {"to_apply",
       {Op::kReduce, Op::kScatter, Op::kCall, Op::kCallStart, Op::kAllReduce, Op::kReduceScatter,
        Op::kSort, Op::kReduceWindow}},
      {"kind", {Op::kFusion}},
      {"calls", {Op::kFusion}},
      {"condition", {Op::kWhile}},
      {"body", {Op::kWhile}},
      {"lhs_batch_dims", {Op::kDot, Op::kRaggedDot}},
      {"lhs_contracting_dims", {Op::kDot, Op::kRaggedDot}},
      {"rhs_batch_dims", {Op::kDot, Op::kRaggedDot}},
      {"rhs_contracting_dims", {Op::kDot, Op::kRaggedDot}},
      {"operand_precision", {Op::kDot, Op::kRaggedDot, Op::kConvolution}},
      {"lhs_ragged_dims", {Op::kRaggedDot}},
      {"rhs_group_dims", {Op::kRaggedDot}},
      {"algorithm", {Op::kDot, Op::kRngBitGenerator}},
      {"distribution", {Op::kRng}},
      {"offset_dims", {Op::kGather}},
      {"collapsed_slice_dims", {Op::kGather}},
      {"start_index_map", {Op::kGather}},
      {"operand_batching_dims", {Op::kGather}},
      {"start_indices_batching_dims", {Op::kGather}},
      {"slice_sizes", {Op::kGather}},
      {"index_vector_dim", {Op::kGather, Op::kScatter}},
      {"indices_are_sorted", {Op::kGather, Op::kScatter}},
      {"update_window_dims", {Op::kScatter}},
      {"inserted_window_dims", {Op::kScatter}},
      {"scatter_dims_to_operand_dims", {Op::kScatter}},
      {"input_batching_dims", {Op::kScatter}},
      {"scatter_indices_batching_dims", {Op::kScatter}},
      {"unique_indices", {Op::kScatter}},
      {"custom_call_target", {Op::kCustomCall}},
      {"called_computations", {Op::kCustomCall}},
      {"custom_call_has_side_effect", {Op::kCustomCall}},
      {"api_version", {Op::kCustomCall}},
      // Layouts of the operands (weft keeps no layouts; kept as text).
      {"operand_layout_constraints", {Op::kCustomCall}},
      {"replica_groups", {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter, Op::kAllToAll}},
      {"channel_id",
       {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter, Op::kAllToAll, Op::kCollectivePermute,
        Op::kSend, Op::kSendDone, Op::kRecv, Op::kRecvDone}},
      {"is_host_transfer", {Op::kSend, Op::kSendDone, Op::kRecv, Op::kRecvDone}},
      {"async_execution_thread", {Op::kCallStart, Op::kCallDone}},
      {"use_global_device_ids", {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter}},
      {"constrain_layout", {Op::kAllReduce, Op::kAllGather, Op::kAllToAll}},
      {"source_target_pairs", {Op::kCollectivePermute}},
      {"sharding", {}},
      {"backend_config", {}},
      {"metadata", {}},
      {"frontend_attributes", {}},
      {"statistics", {}},
      // XLA's original value: which instruction of the program before its
      // passes this one stands for (kept as text).
      {"origin", {}},
  };
  return *table;
}

std::vector<std::string_view> RequiredAttributes(Op op) {
  switch (op) {
    case Op::kBroadcast:
    case Op::kTranspose:
    case Op::kReverse:
    case Op::kConcatenate:
    case Op::kAllGather:
    case Op::kAllToAll:
      return {"dimensions"};
    case Op::kReduce:
    case Op::kReduceScatter:
    case Op::kSort:
      return {"dimensions", "to_apply"};
    case Op::kTopK:
      return {"k"};
    case Op::kRaggedDot:
      return {"lhs_ragged_dims"};
    case Op::kReduceWindow:
      return {"window", "to_apply"};
    case Op::kSelectAndScatter:
      return {"window", "select", "scatter"};
    case Op::kConvolution:
      return {"dim_labels"};
    case Op::kIota:
      return {"iota_dimension"};
    case Op::kGetTupleElement:
      return {"index"};
    case Op::kSlice:
      return {"slice"};
    case Op::kDynamicSlice:
      return {"dynamic_slice_sizes"};
    case Op::kPad:
      return {"padding"};
    case Op::kCompare:
      return {"direction"};
    case Op::kCall:
    case Op::kCallStart:
    case Op::kAllReduce:
      return {"to_apply"};
    case Op::kWhile:
      return {"condition", "body"};
    case Op::kFusion:
      return {"kind", "calls"};
    case Op::kGather:
      return {"offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim",
              "slice_sizes"};
    case Op::kScatter:
      return {"update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
              "index_vector_dim", "to_apply"};
    case Op::kCustomCall:
      return {"custom_call_target"};
    case Op::kCollectivePermute:
      return {"source_target_pairs"};
    case Op::kRng:
      return {"distribution"};
    default:
      return {};
  }
}

}  // namespace weft::hlo
