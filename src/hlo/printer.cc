#include "weft/hlo/printer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "weft/base/error.h"

namespace weft {
namespace {

std::string IntList(const std::vector<int64_t>& values) {
  return fmt::format("{{{}}}", fmt::join(values, ","));
}

std::string Name(const std::string& name, const HloPrintOptions& options) {
  return options.print_percent ? fmt::format("%{}", name) : name;
}

// Quoted, with the escapes the parser understands.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        out += c;
    }
  }
  return out + "\"";
}

void AddDotAttributes(const DotDimensionNumbers& d, std::vector<std::string>* attrs) {
  auto add = [&](const char* key, const std::vector<int64_t>& v) {
    if (!v.empty()) attrs->push_back(fmt::format("{}={}", key, IntList(v)));
  };
  add("lhs_batch_dims", d.lhs_batch_dims);
  add("lhs_contracting_dims", d.lhs_contracting_dims);
  add("rhs_batch_dims", d.rhs_batch_dims);
  add("rhs_contracting_dims", d.rhs_contracting_dims);
}

// XLA's window text: size, then stride, pad and dilations where any dim
// differs from the default.
std::string WindowToString(const std::vector<WindowDim>& window) {
  std::vector<std::string> parts;
  auto part = [&](const char* key, int64_t WindowDim::*field, int64_t default_value) {
    std::vector<int64_t> values;
    bool all_default = true;
    for (const WindowDim& w : window) {
      values.push_back(w.*field);
      all_default = all_default && w.*field == default_value;
    }
    if (!all_default || default_value < 0) {
      parts.push_back(fmt::format("{}={}", key, fmt::join(values, "x")));
    }
  };
  part("size", &WindowDim::size, -1);
  part("stride", &WindowDim::stride, 1);
  std::vector<PadDim> pads;
  bool padded = false;
  for (const WindowDim& w : window) {
    pads.push_back({w.padding_low, w.padding_high, 0});
    padded = padded || w.padding_low != 0 || w.padding_high != 0;
  }
  if (padded) parts.push_back("pad=" + PaddingToString(pads));
  part("lhs_dilate", &WindowDim::base_dilation, 1);
  part("rhs_dilate", &WindowDim::window_dilation, 1);
  std::vector<int64_t> reversal;
  bool reversed = false;
  for (const WindowDim& w : window) {
    reversal.push_back(w.window_reversal ? 1 : 0);
    reversed = reversed || w.window_reversal;
  }
  if (reversed) parts.push_back(fmt::format("rhs_reversal={}", fmt::join(reversal, "x")));
  return fmt::format("{{{}}}", fmt::join(parts, " "));
}

// The attribute list Attributes builds, with what its cases share.
class AttributeList {
 public:
  AttributeList(const HloInstruction& instr, const HloPrintOptions& options)
      : instr_(instr), options_(options) {}
  void Add(std::string s) { out_.push_back(std::move(s)); }
  void List(const char* key, const std::vector<int64_t>& v) {
    Add(fmt::format("{}={}", key, IntList(v)));
  }
  void ListIfAny(const char* key, const std::vector<int64_t>& v) {
    if (!v.empty()) List(key, v);
  }
  // The name of called computation i, as the options print names.
  std::string Computation(int64_t i) const {
    return Name(instr_.called_computations().at(i)->name(), options_);
  }
  std::vector<std::string>& out() { return out_; }

 private:
  const HloInstruction& instr_;
  const HloPrintOptions& options_;
  std::vector<std::string> out_;
};

void AddGatherAttributes(const HloAttributes& a, AttributeList& l) {
  l.List("offset_dims", a.gather.offset_dims);
  l.List("collapsed_slice_dims", a.gather.collapsed_slice_dims);
  l.List("start_index_map", a.gather.start_index_map);
  l.ListIfAny("operand_batching_dims", a.gather.operand_batching_dims);
  l.ListIfAny("start_indices_batching_dims", a.gather.start_indices_batching_dims);
  l.Add(fmt::format("index_vector_dim={}", a.gather.index_vector_dim));
  l.List("slice_sizes", a.gather_slice_sizes);
  if (a.indices_are_sorted) l.Add("indices_are_sorted=true");
}

void AddScatterAttributes(const HloAttributes& a, AttributeList& l) {
  l.List("update_window_dims", a.scatter.update_window_dims);
  l.List("inserted_window_dims", a.scatter.inserted_window_dims);
  l.List("scatter_dims_to_operand_dims", a.scatter.scatter_dims_to_operand_dims);
  l.ListIfAny("input_batching_dims", a.scatter.input_batching_dims);
  l.ListIfAny("scatter_indices_batching_dims", a.scatter.scatter_indices_batching_dims);
  l.Add(fmt::format("index_vector_dim={}", a.scatter.index_vector_dim));
  if (a.indices_are_sorted) l.Add("indices_are_sorted=true");
  if (a.unique_indices) l.Add("unique_indices=true");
  l.Add("to_apply=" + l.Computation(0));
}

void AddCustomCallAttributes(const HloInstruction& instr, AttributeList& l) {
  const HloAttributes& a = instr.attrs();
  l.Add("custom_call_target=" + Quote(a.custom_call_target));
  if (!instr.called_computations().empty()) {
    std::vector<std::string> names;
    for (size_t i = 0; i < instr.called_computations().size(); ++i)
      names.push_back(l.Computation(i));
    l.Add(fmt::format("called_computations={{{}}}", fmt::join(names, ", ")));
  }
  if (a.custom_call_has_side_effect) l.Add("custom_call_has_side_effect=true");
  if (!a.custom_call_api_version.empty()) l.Add("api_version=" + a.custom_call_api_version);
}

void AddCollectivePrefix(const HloAttributes& a, AttributeList& l) {
  if (a.channel_id) l.Add(fmt::format("channel_id={}", *a.channel_id));
  l.Add("replica_groups=" + ReplicaGroupsToString(a.replica_groups));
  if (a.constrain_layout) l.Add("constrain_layout=true");
}

// all-reduce, all-gather, all-to-all, reduce-scatter, collective-permute.
void AddCollectiveAttributes(const HloInstruction& instr, AttributeList& l) {
  const HloAttributes& a = instr.attrs();
  switch (instr.opcode()) {
    case HloOpcode::kAllReduce:
      AddCollectivePrefix(a, l);
      if (a.use_global_device_ids) l.Add("use_global_device_ids=true");
      l.Add("to_apply=" + l.Computation(0));
      break;
    case HloOpcode::kAllGather:
    case HloOpcode::kAllToAll:
      AddCollectivePrefix(a, l);
      l.List("dimensions", a.dimensions);
      if (a.use_global_device_ids) l.Add("use_global_device_ids=true");
      break;
    case HloOpcode::kReduceScatter:
      AddCollectivePrefix(a, l);
      l.List("dimensions", a.dimensions);
      if (a.use_global_device_ids) l.Add("use_global_device_ids=true");
      l.Add("to_apply=" + l.Computation(0));
      break;
    case HloOpcode::kCollectivePermute: {
      if (a.channel_id) l.Add(fmt::format("channel_id={}", *a.channel_id));
      std::vector<std::string> pairs;
      for (auto [s, t] : a.source_target_pairs) pairs.push_back(fmt::format("{{{},{}}}", s, t));
      l.Add(fmt::format("source_target_pairs={{{}}}", fmt::join(pairs, ",")));
      break;
    }
    default:
      break;
  }
}

// `{[start:limit], [start:limit:stride], ...}`: the stride when it is not 1.
std::string SliceToString(const std::vector<SliceDim>& slice) {
  std::vector<std::string> ranges;
  for (const SliceDim& s : slice) {
    ranges.push_back(s.stride == 1 ? fmt::format("[{}:{}]", s.start, s.limit)
                                   : fmt::format("[{}:{}:{}]", s.start, s.limit, s.stride));
  }
  return fmt::format("{{{}}}", fmt::join(ranges, ", "));
}

// The pred form's true/false computations, or the index form's branches.
void AddConditionalAttributes(const HloInstruction& instr, AttributeList& l) {
  if (instr.operand_count() > 0 &&
      instr.operand(0)->shape().element_type() == PrimitiveType::kPred) {
    l.Add("true_computation=" + l.Computation(0));
    l.Add("false_computation=" + l.Computation(1));
  } else {
    std::vector<std::string> names;
    for (size_t i = 0; i < instr.called_computations().size(); ++i)
      names.push_back(l.Computation(i));
    l.Add(fmt::format("branch_computations={{{}}}", fmt::join(names, ", ")));
  }
}

void AddConvolutionAttributes(const HloAttributes& a, AttributeList& l) {
  // XLA leaves out the window of a convolution without spatial dims.
  if (!a.window.empty()) l.Add("window=" + WindowToString(a.window));
  l.Add("dim_labels=" + ConvolutionDimLabelsString(a.convolution));
  if (a.feature_group_count != 1) {
    l.Add(fmt::format("feature_group_count={}", a.feature_group_count));
  }
  if (a.batch_group_count != 1) {
    l.Add(fmt::format("batch_group_count={}", a.batch_group_count));
  }
}

// XLA's attribute order: op-specific attributes, called computations,
// sharding, then the verbatim extras and backend_config.
std::vector<std::string> Attributes(const HloInstruction& instr, const HloPrintOptions& options) {
  const HloAttributes& a = instr.attrs();
  AttributeList l(instr, options);
  switch (instr.opcode()) {
    case HloOpcode::kIota:
      l.Add(fmt::format("iota_dimension={}", a.iota_dimension));
      break;
    case HloOpcode::kBroadcast:
    case HloOpcode::kTranspose:
    case HloOpcode::kReverse:
    case HloOpcode::kConcatenate:
      l.List("dimensions", a.dimensions);
      break;
    case HloOpcode::kSlice:
      l.Add("slice=" + SliceToString(a.slice));
      break;
    case HloOpcode::kDynamicSlice:
      l.List("dynamic_slice_sizes", a.dynamic_slice_sizes);
      break;
    case HloOpcode::kPad:
      l.Add("padding=" + PaddingToString(a.padding));
      break;
    case HloOpcode::kCompare:
      l.Add(fmt::format("direction={}", ComparisonDirectionString(a.comparison_direction)));
      if (!a.comparison_type.empty()) l.Add("type=" + a.comparison_type);
      break;
    case HloOpcode::kReduce:
      l.List("dimensions", a.dimensions);
      l.Add("to_apply=" + l.Computation(0));
      break;
    case HloOpcode::kSort:
      l.List("dimensions", a.dimensions);
      if (a.is_stable) l.Add("is_stable=true");
      l.Add("to_apply=" + l.Computation(0));
      break;
    case HloOpcode::kTopK:
      l.Add(fmt::format("k={}", a.k));
      l.Add(fmt::format("largest={}", a.largest));
      break;
    case HloOpcode::kReduceWindow:
      l.Add("window=" + WindowToString(a.window));
      l.Add("to_apply=" + l.Computation(0));
      break;
    case HloOpcode::kSelectAndScatter:
      l.Add("window=" + WindowToString(a.window));
      l.Add("select=" + l.Computation(0));
      l.Add("scatter=" + l.Computation(1));
      break;
    case HloOpcode::kConditional:
      AddConditionalAttributes(instr, l);
      break;
    case HloOpcode::kDot:
      AddDotAttributes(a.dot, &l.out());
      break;
    case HloOpcode::kRaggedDot:
      AddDotAttributes(a.dot, &l.out());
      l.Add(fmt::format("lhs_ragged_dims={}", IntList(a.lhs_ragged_dims)));
      if (!a.rhs_group_dims.empty())
        l.Add(fmt::format("rhs_group_dims={}", IntList(a.rhs_group_dims)));
      break;
    case HloOpcode::kConvolution:
      AddConvolutionAttributes(a, l);
      break;
    case HloOpcode::kRngBitGenerator:
      l.Add(fmt::format("algorithm={}", RngAlgorithmString(a.rng_algorithm)));
      break;
    case HloOpcode::kRng:
      l.Add(fmt::format("distribution={}", RngDistributionString(a.rng_distribution)));
      break;
    case HloOpcode::kCholesky:
      l.Add(fmt::format("lower={}", a.lower));
      break;
    case HloOpcode::kTriangularSolve:
      l.Add(fmt::format("left_side={}", a.left_side));
      l.Add(fmt::format("lower={}", a.lower));
      l.Add(fmt::format("unit_diagonal={}", a.unit_diagonal));
      l.Add(fmt::format("transpose_a={}", TriangularTransposeString(a.transpose_a)));
      break;
    case HloOpcode::kGather:
      AddGatherAttributes(a, l);
      break;
    case HloOpcode::kScatter:
      AddScatterAttributes(a, l);
      break;
    case HloOpcode::kGetTupleElement:
      l.Add(fmt::format("index={}", a.tuple_index));
      break;
    case HloOpcode::kWhile:
      l.Add("condition=" + l.Computation(0));
      l.Add("body=" + l.Computation(1));
      break;
    case HloOpcode::kCall:
    case HloOpcode::kCallStart:
      l.Add("to_apply=" + l.Computation(0));
      break;
    case HloOpcode::kFusion:
      l.Add(fmt::format("kind={}", FusionKindString(a.fusion_kind)));
      l.Add("calls=" + l.Computation(0));
      break;
    case HloOpcode::kCustomCall:
      AddCustomCallAttributes(instr, l);
      break;
    case HloOpcode::kSend:
    case HloOpcode::kSendDone:
    case HloOpcode::kRecv:
    case HloOpcode::kRecvDone:
      if (a.channel_id) l.Add(fmt::format("channel_id={}", *a.channel_id));
      break;
    case HloOpcode::kAllReduce:
    case HloOpcode::kAllGather:
    case HloOpcode::kAllToAll:
    case HloOpcode::kReduceScatter:
    case HloOpcode::kCollectivePermute:
      AddCollectiveAttributes(instr, l);
      break;
    default:
      break;
  }
  if (instr.sharding()) l.Add("sharding=" + instr.sharding()->ToString());
  for (const auto& [key, value] : a.passthrough) l.Add(key + "=" + value);
  if (!a.backend_config.empty()) {
    // JSON objects print bare, as XLA prints structured backend configs.
    const std::string& c = a.backend_config;
    l.Add("backend_config=" + (c.front() == '{' && c.back() == '}' ? c : Quote(c)));
  }
  return std::move(l.out());
}

std::string Signature(const HloComputation& c, const HloPrintOptions& options) {
  std::vector<std::string> params;
  for (const HloInstruction* p : c.parameter_instructions()) {
    params.push_back(fmt::format("{}: {}", p->name(), p->shape().ToString(options.print_layout)));
  }
  const HloInstruction* root = c.root_instruction();
  return fmt::format(" ({}) -> {}", fmt::join(params, ", "),
                     root ? root->shape().ToString(options.print_layout) : "()");
}

}  // namespace

std::string ReplicaGroupsToString(const std::vector<std::vector<int64_t>>& groups) {
  std::vector<std::string> parts;
  for (const auto& g : groups) parts.push_back(IntList(g));
  return fmt::format("{{{}}}", fmt::join(parts, ","));
}

std::string PaddingToString(const std::vector<PadDim>& padding) {
  bool interior = false;
  for (const PadDim& p : padding) interior |= p.interior != 0;
  std::vector<std::string> parts;
  for (const PadDim& p : padding) {
    parts.push_back(interior ? fmt::format("{}_{}_{}", p.low, p.high, p.interior)
                             : fmt::format("{}_{}", p.low, p.high));
  }
  return fmt::format("{}", fmt::join(parts, "x"));
}

std::string PrintInstruction(const HloInstruction& instr, const HloPrintOptions& options) {
  const bool is_root = instr.parent() != nullptr && instr.parent()->root_instruction() == &instr;
  std::string operands;
  switch (instr.opcode()) {
    case HloOpcode::kParameter:
      operands = fmt::format("{}", instr.parameter_number());
      break;
    case HloOpcode::kConstant:
      operands = instr.literal().ToString();
      break;
    default: {
      std::vector<std::string> parts;
      for (const HloInstruction* op : instr.operands()) {
        std::string name = Name(op->name(), options);
        parts.push_back(options.print_operand_shapes
                            ? op->shape().ToString(options.print_layout) + " " + name
                            : name);
      }
      operands = fmt::format("{}", fmt::join(parts, ", "));
    }
  }
  std::string line = fmt::format(
      "{}{} = {} {}({})", is_root ? "ROOT " : "", Name(instr.name(), options),
      instr.shape().ToString(options.print_layout), HloOpcodeString(instr.opcode()), operands);
  for (const std::string& attr : Attributes(instr, options)) line += ", " + attr;
  return line;
}

std::string PrintComputation(const HloComputation& c, const HloPrintOptions& options) {
  std::string out = fmt::format("{}{}{} {{\n", c.IsEntry() ? "ENTRY " : "", Name(c.name(), options),
                                options.print_program_shape ? Signature(c, options) : "");
  for (const HloInstruction* instr : c.instructions()) {
    out += "  " + PrintInstruction(*instr, options) + "\n";
  }
  if (c.execution_thread() != "main") {
    return out + fmt::format("}}, execution_thread=\"{}\"\n", c.execution_thread());
  }
  return out + "}\n";
}

std::string PrintModule(const HloModule& module, const HloPrintOptions& options) {
  std::string out = "HloModule " + module.name();
  const HloComputation* entry = module.entry_computation();
  if (options.print_program_shape && entry != nullptr) {
    std::vector<std::string> params;
    for (const HloInstruction* p : entry->parameter_instructions()) {
      params.push_back(p->shape().ToString(options.print_layout));
    }
    out += fmt::format(", entry_computation_layout={{({})->{}}}", fmt::join(params, ", "),
                       entry->root_instruction()->shape().ToString(options.print_layout));
  }
  if (module.replica_count() != 1) out += fmt::format(", replica_count={}", module.replica_count());
  if (module.num_partitions() != 1) {
    out += fmt::format(", num_partitions={}", module.num_partitions());
  }
  out += "\n";
  for (const HloComputation* c : module.MakeComputationPostOrder()) {
    out += '\n';
    out += PrintComputation(*c, options);
  }
  return out;
}

}  // namespace weft
