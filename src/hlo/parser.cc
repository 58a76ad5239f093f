#include "weft/hlo/parser.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "attribute_text.h"
#include "hlo_text_cursor.h"
#include "opcode_attributes.h"
#include "weft/base/data_files.h"
#include "weft/base/error.h"
#include "weft/hlo/shape_inference.h"
#include "weft/hlo/verifier.h"
#include "weft/sharding/hlo_sharding.h"

namespace weft {
namespace {

using hlo::HloTextCursor;
using Op = HloOpcode;

// Whether an array laid out minor-to-major as `layout` (empty: the default)
// holds its elements in row-major order: its dims of size > 1 run from
// major to minor in increasing order.
bool IsRowMajor(const std::vector<int64_t>& layout, const Shape& shape) {
  int64_t last = -1;
  for (auto it = layout.rbegin(); it != layout.rend(); ++it) {
    if (shape.dimensions(*it) <= 1) continue;
    if (*it < last) return false;
    last = *it;
  }
  return true;
}

class HloTextParser {
 public:
  HloTextParser(std::string_view text, const HloParseOptions& options)
      : cur_(text, options.source_name),
        max_expanded_device_ids_(options.max_expanded_device_ids) {}

  std::unique_ptr<HloModule> ParseModule() {
    // As XLA, a text of computations alone (starting with ENTRY or with
    // `name {`) is a module named after its entry, without module attributes.
    const bool headed = cur_.TryKeyword("HloModule");
    if (!headed && !StartsWithComputation()) cur_.Expected("'HloModule <name>' at the start");
    module_ = std::make_unique<HloModule>(headed ? cur_.ParseName("a module name") : "");
    while (headed && cur_.TryConsume(",")) ParseModuleAttribute();
    HloComputation* entry = nullptr;
    HloComputation* last = nullptr;
    while (!cur_.AtEnd()) {
      const size_t at = cur_.Mark();
      const bool is_entry = cur_.TryKeyword("ENTRY");
      if (is_entry && entry != nullptr) cur_.FailAt(at, "a module has only one ENTRY computation");
      last = ParseComputation();
      if (is_entry) entry = last;
    }
    if (last == nullptr) cur_.Expected("a computation");
    // As in XLA, without an ENTRY marker the last computation is the entry.
    module_->set_entry_computation(entry != nullptr ? entry : last);
    if (!headed) module_->set_name("module_" + module_->entry_computation()->name());
    ResolveCalls();
    return std::move(module_);
  }

 private:
  struct PendingCall {
    HloInstruction* instr;
    std::vector<std::pair<std::string, size_t>> names;  // in called-computation order
  };

  // ENTRY, or a computation name followed by its body's '{'.
  bool StartsWithComputation() {
    const size_t at = cur_.Mark();
    bool yes = cur_.TryKeyword("ENTRY");
    if (!yes) {
      try {
        cur_.ParseName("a computation name");
        yes = cur_.Peek() == '{';
      } catch (const Error&) {
        yes = false;
      }
    }
    cur_.set_pos(at);
    return yes;
  }

  void ParseModuleAttribute() {
    const size_t at = cur_.Mark();
    const std::string key = cur_.ParseWord("a module attribute");
    cur_.Expect("=", fmt::format("'=' after {}", key));
    if (key == "num_partitions" || key == "replica_count") {
      const size_t value_at = cur_.Mark();
      const int64_t n = cur_.ParseInt(key);
      if (n < 1) cur_.FailAt(at, fmt::format("{} must be >= 1", key));
      key == "num_partitions" ? module_->set_num_partitions(n) : module_->set_replica_count(n);
      // Bounded (with their product) before any sharding is read against them.
      if (!DeviceCountWithin(
              std::vector<int64_t>{module_->num_partitions(), module_->replica_count()})) {
        cur_.FailAt(
            value_at,
            fmt::format("{}={} makes num_partitions x replica_count = {} x {} devices, "
                        "more than {}, the most weft supports",
                        key, n, module_->num_partitions(), module_->replica_count(), kMaxDevices));
      }
    } else if (key == "entry_computation_layout") {
      // Derived from the entry computation; parsed only to reject layouts.
      cur_.Expect("{", "'{' to start entry_computation_layout");
      cur_.Expect("(", "'(' before the parameter shapes");
      if (!cur_.TryConsume(")")) {
        do {
          cur_.ParseShape();
        } while (cur_.TryConsume(","));
        cur_.Expect(")", "',' or ')' after the parameter shapes");
      }
      cur_.Expect("->", "'->' before the result shape");
      cur_.ParseShape();
      cur_.Expect("}", "'}' to end entry_computation_layout");
    } else {
      cur_.ParseRawValue(key);  // other XLA module options do not affect weft
    }
  }

  HloComputation* ParseComputation() {
    const size_t at = cur_.Mark();
    std::string name = cur_.ParseName("a computation name");
    if (computations_.count(name)) {
      cur_.FailAt(at, fmt::format("computation '{}' is defined twice", name));
    }
    auto computation = std::make_unique<HloComputation>(name);
    size_t signature_at = 0;
    std::optional<Shape> result;
    if (cur_.Peek() == '(') {
      signature_at = cur_.Mark();
      cur_.Expect("(", "'('");
      if (!cur_.TryConsume(")")) {
        do {
          cur_.ParseName("a parameter name");
          cur_.Expect(":", "':' after the parameter name");
          cur_.ParseShape();
        } while (cur_.TryConsume(","));
        cur_.Expect(")", "',' or ')' in the computation signature");
      }
      cur_.Expect("->", "'->' before the computation's result shape");
      result = cur_.ParseShape();
    }
    cur_.Expect("{", fmt::format("'{{' to start computation '{}'", name));
    // Instruction names are scoped per computation, as in XLA's parser; the
    // module renames clashes across computations when adding them.
    std::unordered_map<std::string, HloInstruction*> scope;
    names_.clear();
    layouts_.clear();
    HloInstruction* root = nullptr;
    while (!cur_.TryConsume("}")) {
      if (cur_.AtEnd()) cur_.Expected(fmt::format("'}}' to end computation '{}'", name));
      const size_t root_at = cur_.Mark();
      const bool is_root = cur_.TryKeyword("ROOT");
      HloInstruction* instr = ParseInstruction(computation.get(), scope, root_at);
      if (is_root) {
        if (root != nullptr) cur_.FailAt(root_at, fmt::format("'{}' has two ROOTs", name));
        root = instr;
      }
    }
    if (computation->instruction_count() == 0) {
      cur_.FailAt(at, fmt::format("computation '{}' has no instructions", name));
    }
    // XLA's one computation attribute: `}, execution_thread="name"`.
    if (cur_.TryConsume(",")) {
      const size_t key_at = cur_.Mark();
      const std::string key = cur_.ParseWord("a computation attribute");
      if (key != "execution_thread") {
        cur_.FailAt(key_at, fmt::format("unknown attribute '{}' after computation '{}'; XLA "
                                        "allows only execution_thread= there",
                                        key, name));
      }
      cur_.Expect("=", "'=' after execution_thread");
      computation->set_execution_thread(cur_.ParseQuoted("the execution thread's name"));
    }
    if (root != nullptr) computation->set_root_instruction(root);
    if (signature_at != 0) CheckSignature(*computation, *result, signature_at);
    HloComputation* added = module_->AddComputation(std::move(computation));
    computations_[name] = added;
    return added;
  }

  // XLA reads a computation's signature for its result shape only: the
  // parameter list is not compared with the body (XLA's own tests write
  // `ENTRY main() -> f64[11]` above a body with a parameter).
  void CheckSignature(const HloComputation& c, const Shape& result, size_t at) {
    if (c.root_instruction()->shape() != result) {
      cur_.FailAt(at, fmt::format("signature of '{}' returns {} but its root is {}", c.name(),
                                  result.ToString(), c.root_instruction()->shape().ToString()));
    }
  }

  // `statement_at`: where the line starts (at ROOT if present); the
  // instruction's location for later messages.
  HloInstruction* ParseInstruction(HloComputation* computation,
                                   std::unordered_map<std::string, HloInstruction*>& scope,
                                   size_t statement_at) {
    const size_t at = cur_.Mark();
    std::string name = cur_.ParseName("an instruction name (or '}')");
    if (auto it = names_.find(name); it != names_.end()) {
      cur_.FailAt(at, fmt::format("instruction name '{}' is already used at {}", name,
                                  cur_.Where(it->second)));
    }
    names_[name] = at;
    cur_.Expect("=", fmt::format("'=' after instruction name '{}'", name));
    // XLA's text may leave out a result shape its operands determine.
    const bool declared = cur_.AtShape();
    Shape shape = declared ? cur_.ParseShape() : Shape();
    const std::vector<int64_t> layout = declared ? cur_.last_layout() : std::vector<int64_t>{};
    const size_t opcode_at = cur_.Mark();
    const std::string opcode_name = cur_.ParseWord("an opcode");
    // A bitcast that keeps every element where a reshape puts it is one.
    const bool bitcast = opcode_name == "bitcast";
    std::optional<Op> opcode = bitcast ? Op::kReshape : StringToHloOpcode(opcode_name);
    if (!opcode) {
      cur_.FailAt(opcode_at, fmt::format("unsupported opcode '{}'; weft supports {}", opcode_name,
                                         SupportedHloOpcodeNames()));
    }
    cur_.Expect("(", fmt::format("'(' after {}", opcode_name));
    HloAttributes attrs;
    std::vector<HloInstruction*> operands;
    if (*opcode == Op::kParameter) {
      const size_t num_at = cur_.Mark();
      attrs.parameter_number = cur_.ParseInt("a parameter number");
      if (attrs.parameter_number < 0 ||
          (attrs.parameter_number < computation->num_parameters() &&
           computation->parameter_instruction(attrs.parameter_number) != nullptr)) {
        cur_.FailAt(num_at, fmt::format("parameter number {} is negative or already used",
                                        attrs.parameter_number));
      }
      cur_.Expect(")", "')' after the parameter number");
    } else if (*opcode == Op::kConstant) {
      if (!shape.IsArray()) cur_.FailAt(at, "a constant must have an array shape");
      attrs.literal = ParseLiteral(cur_, shape);
      cur_.Expect(")", "')' after the constant value");
    } else if (!cur_.TryConsume(")")) {
      do {
        if (cur_.AtShape()) cur_.ParseShape();  // XLA prints operand shapes; redundant
        const size_t op_at = cur_.Mark();
        std::string operand = cur_.ParseName("an operand name");
        auto it = scope.find(operand);
        if (it == scope.end()) {
          cur_.FailAt(op_at, fmt::format("operand '{}' is not defined before this use in "
                                         "computation '{}'",
                                         operand, computation->name()));
        }
        operands.push_back(it->second);
      } while (cur_.TryConsume(","));
      cur_.Expect(")", "',' or ')' in the operand list");
    }
    PendingCall pending;
    std::optional<HloSharding> sharding;
    std::map<std::string, size_t> seen;
    while (cur_.TryConsume(",")) {
      ParseAttribute(*opcode, attrs, pending, sharding, seen);
    }
    for (std::string_view key : hlo::RequiredAttributes(*opcode)) {
      if (!seen.count(std::string(key))) {
        cur_.FailAt(at, fmt::format("{} '{}' is missing attribute {}=", opcode_name, name, key));
      }
    }
    if (bitcast) CheckBitcastIsAReshape(name, shape, layout, operands, at);
    if (shape.IsArray() && !IsRowMajor(layout, shape)) layouts_[name] = layout;
    auto instr = HloInstruction::Create(*opcode, std::move(shape), std::move(operands),
                                        std::move(attrs), {}, name);
    if (!declared) InferOmittedShape(*instr, at);
    // As XLA's parser, one sharding on a tuple-shaped instruction is that
    // sharding on each of its leaves.
    if (sharding && !sharding->IsTuple() && instr->shape().IsTuple() &&
        instr->shape().LeafCount() > 0) {
      sharding = HloSharding::Tuple(
          std::vector<HloSharding>(static_cast<size_t>(instr->shape().LeafCount()), *sharding));
    }
    instr->set_sharding(std::move(sharding));
    instr->set_location(cur_.SourceLocationOf(statement_at));
    HloInstruction* raw = computation->AddInstruction(std::move(instr));
    scope[name] = raw;
    if (!pending.names.empty()) {
      pending.instr = raw;
      calls_.push_back(std::move(pending));
    }
    return raw;
  }

  // weft computes on logical values, so a bitcast runs only where it is a
  // reshape: the same element type and count, both sides in row-major order.
  void CheckBitcastIsAReshape(const std::string& name, const Shape& shape,
                              const std::vector<int64_t>& layout,
                              const std::vector<HloInstruction*>& operands, size_t at) {
    if (!shape.IsArray() || operands.size() != 1 || !operands[0]->shape().IsArray()) {
      cur_.FailAt(at, fmt::format("bitcast '{}' needs its array shape written and one array "
                                  "operand",
                                  name));
    }
    const Shape& in = operands[0]->shape();
    auto it = layouts_.find(operands[0]->name());
    const std::vector<int64_t> in_layout =
        it == layouts_.end() ? std::vector<int64_t>{} : it->second;
    if (in.element_type() == shape.element_type() && in.ElementsCount() == shape.ElementsCount() &&
        IsRowMajor(in_layout, in) && IsRowMajor(layout, shape)) {
      return;
    }
    auto text = [](const Shape& s, const std::vector<int64_t>& l) {
      return l.empty() ? s.ToString() : fmt::format("{}{{{}}}", s.ToString(), fmt::join(l, ","));
    };
    cur_.FailAt(at, fmt::format("bitcast '{}' from {} to {} is not a reshape: it {}; weft "
                                "computes on logical values and does not model layouts. Use "
                                "the module as XLA dumps it before layout assignment (e.g. "
                                "*.before_optimizations.txt), or write the transpose and "
                                "reshape (bitcast-convert for a change of element type)",
                                name, text(in, in_layout), text(shape, layout),
                                in.element_type() != shape.element_type() ||
                                        in.ElementsCount() != shape.ElementsCount()
                                    ? "changes the element type or count"
                                    : "changes the layout"));
  }

  // The result shape of an instruction written without one: only where the
  // operands alone determine it (elementwise ops but convert, compare,
  // select, clamp, copy, tuple, get-tuple-element, topk, after-all, outfeed,
  // convolution, send, send-done, recv-done; a while's is its operand's, as in XLA, and the
  // verifier checks its computations against it). Other ops with called computations (sort,
  // reduce-window, ...) need their shape written: the computations are resolved only after the
  // whole text.
  void InferOmittedShape(HloInstruction& instr, size_t at) {
    const Op op = instr.opcode();
    if (op == Op::kWhile && instr.operand_count() == 1) {
      instr.set_shape(instr.operand(0)->shape());
      return;
    }
    const bool inferable = (IsElementwise(op) && op != Op::kConvert) || op == Op::kTuple ||
                           op == Op::kGetTupleElement || op == Op::kCopy || op == Op::kTopK ||
                           op == Op::kAfterAll || op == Op::kOutfeed || op == Op::kConvolution ||
                           op == Op::kSend || op == Op::kSendDone || op == Op::kRecvDone;
    const bool no_operands_needed = op == Op::kTuple || op == Op::kAfterAll;
    if (!inferable || (!no_operands_needed && instr.operand_count() == 0)) {
      cur_.FailAt(
          at, fmt::format("'{}' ({}) has no result shape, and its operands do not "
                          "determine it; write the shape as XLA prints it, e.g. '{} = "
                          "f32[4,8] {}(...)'",
                          instr.name(), HloOpcodeString(op), instr.name(), HloOpcodeString(op)));
    }
    try {
      instr.set_shape(InferHloShape(instr));
    } catch (const Error& e) {
      cur_.FailAt(at, fmt::format("cannot infer the shape of '{}' ({}): {}", instr.name(),
                                  HloOpcodeString(op), e.what()));
    }
  }

  // The dot's, gather's and scatter's dimension numbers; false for any other
  // attribute.
  bool ParseDimensionNumbers(Op op, const std::string& key, HloAttributes& a) {
    auto list = [&](std::vector<int64_t>& field) { field = cur_.ParseIntList(key); };
    if (key == "index_vector_dim") {
      (op == Op::kGather ? a.gather.index_vector_dim : a.scatter.index_vector_dim) =
          cur_.ParseInt(key);
    } else if (key == "lhs_batch_dims") {
      list(a.dot.lhs_batch_dims);
    } else if (key == "lhs_contracting_dims") {
      list(a.dot.lhs_contracting_dims);
    } else if (key == "rhs_batch_dims") {
      list(a.dot.rhs_batch_dims);
    } else if (key == "rhs_contracting_dims") {
      list(a.dot.rhs_contracting_dims);
    } else if (key == "lhs_ragged_dims") {
      list(a.lhs_ragged_dims);
    } else if (key == "rhs_group_dims") {
      list(a.rhs_group_dims);
    } else if (key == "offset_dims") {
      list(a.gather.offset_dims);
    } else if (key == "collapsed_slice_dims") {
      list(a.gather.collapsed_slice_dims);
    } else if (key == "start_index_map") {
      list(a.gather.start_index_map);
    } else if (key == "operand_batching_dims") {
      list(a.gather.operand_batching_dims);
    } else if (key == "start_indices_batching_dims") {
      list(a.gather.start_indices_batching_dims);
    } else if (key == "slice_sizes") {
      list(a.gather_slice_sizes);
    } else if (key == "update_window_dims") {
      list(a.scatter.update_window_dims);
    } else if (key == "inserted_window_dims") {
      list(a.scatter.inserted_window_dims);
    } else if (key == "scatter_dims_to_operand_dims") {
      list(a.scatter.scatter_dims_to_operand_dims);
    } else if (key == "input_batching_dims") {
      list(a.scatter.input_batching_dims);
    } else if (key == "scatter_indices_batching_dims") {
      list(a.scatter.scatter_indices_batching_dims);
    } else {
      return false;
    }
    return true;
  }

  // An attribute's name, checked against `op` and the attributes `seen`
  // before it (which it joins), and the '=' after it.
  std::string ParseAttributeName(Op op, std::map<std::string, size_t>& seen) {
    const size_t at = cur_.Mark();
    const std::string key = cur_.ParseWord("an attribute name");
    const auto& table = hlo::AttributeOpcodes();
    auto rule = table.find(key);
    if (rule == table.end()) {
      cur_.FailAt(at, fmt::format("unknown attribute '{}' on {}", key, HloOpcodeString(op)));
    }
    if (!rule->second.empty() &&
        std::find(rule->second.begin(), rule->second.end(), op) == rule->second.end()) {
      cur_.FailAt(at, fmt::format("attribute '{}' does not apply to {}", key, HloOpcodeString(op)));
    }
    if (!seen.emplace(key, at).second) {
      cur_.FailAt(at, fmt::format("attribute '{}' given twice", key));
    }
    cur_.Expect("=", fmt::format("'=' after {}", key));
    return key;
  }

  void ParseAttribute(Op op, HloAttributes& a, PendingCall& pending,
                      std::optional<HloSharding>& sharding, std::map<std::string, size_t>& seen) {
    const size_t at = cur_.Mark();
    const std::string key = ParseAttributeName(op, seen);
    if (ParseDimensionNumbers(op, key, a)) return;
    auto list = [&](std::vector<int64_t>& field) { field = cur_.ParseIntList(key); };
    auto flag = [&](bool& field) {
      field = cur_.ParseBool(fmt::format("true or false for {}", key));
    };
    if (key == "dimensions") {
      list(a.dimensions);
    } else if (key == "iota_dimension") {
      a.iota_dimension = cur_.ParseInt(key);
    } else if (key == "index") {
      a.tuple_index = cur_.ParseInt(key);
    } else if (key == "channel_id") {
      a.channel_id = cur_.ParseInt(key);
    } else if (key == "slice") {
      ParseSlice(cur_, a.slice);
    } else if (key == "dynamic_slice_sizes") {
      list(a.dynamic_slice_sizes);
    } else if (key == "padding") {
      ParsePadding(cur_, a.padding);
    } else if (key == "direction") {
      const size_t dir_at = cur_.Mark();
      std::optional<ComparisonDirection> d = StringToComparisonDirection(cur_.ParseWord(key));
      if (!d) cur_.FailAt(dir_at, "direction must be one of EQ, NE, LT, LE, GT, GE");
      a.comparison_direction = *d;
    } else if (key == "type") {
      a.comparison_type = cur_.ParseWord("a comparison type");
    } else if (key == "to_apply" || key == "condition" || key == "select" ||
               key == "true_computation") {
      // The first called computation, whichever order the attributes come in.
      pending.names.insert(pending.names.begin(), {cur_.ParseName("a computation name"), at});
    } else if (key == "scatter" || key == "false_computation") {
      pending.names.push_back({cur_.ParseName("a computation name"), at});
    } else if (key == "branch_computations" || key == "called_computations") {
      cur_.Expect("{", fmt::format("'{{' to start {}", key));
      if (!cur_.TryConsume("}")) {
        do {
          const size_t name_at = cur_.Mark();
          pending.names.push_back({cur_.ParseName("a computation name"), name_at});
        } while (cur_.TryConsume(","));
        cur_.Expect("}", fmt::format("',' or '}}' in {}", key));
      }
    } else if (key == "is_stable") {
      flag(a.is_stable);
    } else if (key == "k") {
      a.k = cur_.ParseInt(key);
    } else if (key == "largest") {
      flag(a.largest);
    } else if (key == "lower") {
      flag(a.lower);
    } else if (key == "left_side") {
      flag(a.left_side);
    } else if (key == "unit_diagonal") {
      flag(a.unit_diagonal);
    } else if (key == "transpose_a") {
      const size_t value_at = cur_.Mark();
      std::optional<TriangularTranspose> t = StringToTriangularTranspose(cur_.ParseWord(key));
      if (!t) cur_.FailAt(value_at, "transpose_a must be one of NO_TRANSPOSE, TRANSPOSE, ADJOINT");
      a.transpose_a = *t;
    } else if (key == "window") {
      a.window = ParseWindow(cur_);
    } else if (key == "dim_labels") {
      const size_t value_at = cur_.Mark();
      std::string error;
      std::optional<ConvolutionDimensionNumbers> dn =
          ParseConvolutionDimLabels(cur_.ParseRawValue(key), &error);
      if (!dn) cur_.FailAt(value_at, error);
      a.convolution = *dn;
    } else if (key == "feature_group_count" || key == "batch_group_count") {
      const size_t value_at = cur_.Mark();
      const int64_t count = cur_.ParseInt(key);
      if (count < 1) cur_.FailAt(value_at, fmt::format("{} must be >= 1, got {}", key, count));
      (key == "feature_group_count" ? a.feature_group_count : a.batch_group_count) = count;
    } else if (key == "calls") {
      pending.names.push_back({cur_.ParseName("a computation name"), at});
    } else if (key == "kind") {
      const size_t kind_at = cur_.Mark();
      std::optional<FusionKind> kind = StringToFusionKind(cur_.ParseWord(key));
      if (!kind) cur_.FailAt(kind_at, "fusion kind must be one of kLoop, kInput, kOutput, kCustom");
      a.fusion_kind = *kind;
    } else if (key == "body") {
      pending.names.push_back({cur_.ParseName("a computation name"), at});
    } else if (key == "indices_are_sorted") {
      flag(a.indices_are_sorted);
    } else if (key == "unique_indices") {
      flag(a.unique_indices);
    } else if (key == "use_global_device_ids") {
      flag(a.use_global_device_ids);
    } else if (key == "constrain_layout") {
      flag(a.constrain_layout);
    } else if (key == "custom_call_has_side_effect") {
      flag(a.custom_call_has_side_effect);
    } else if (key == "custom_call_target") {
      a.custom_call_target = cur_.ParseQuoted("a quoted custom_call_target");
    } else if (key == "api_version") {
      a.custom_call_api_version = cur_.ParseWord("an api_version");
    } else if (key == "backend_config") {
      a.backend_config = cur_.Peek() == '"' ? cur_.ParseQuoted(key) : cur_.ParseRawValue(key);
    } else if (key == "replica_groups") {
      a.replica_groups = ParseReplicaGroups();
    } else if (key == "source_target_pairs") {
      a.source_target_pairs = ParsePairs(cur_);
    } else if (key == "algorithm" && op == Op::kRngBitGenerator) {
      const size_t value_at = cur_.Mark();
      std::optional<RngAlgorithm> algorithm = StringToRngAlgorithm(cur_.ParseWord(key));
      if (!algorithm) {
        cur_.FailAt(value_at, "algorithm must be one of rng_default, rng_three_fry, rng_philox");
      }
      a.rng_algorithm = *algorithm;
    } else if (key == "distribution") {
      const size_t value_at = cur_.Mark();
      std::optional<RngDistribution> d = StringToRngDistribution(cur_.ParseWord(key));
      if (!d) cur_.FailAt(value_at, "distribution must be rng_uniform or rng_normal");
      a.rng_distribution = *d;
    } else if (key == "sharding") {
      sharding = ParseSharding();
    } else {
      a.passthrough.push_back({key, cur_.ParseRawValue(key)});
    }
  }

  HloSharding ParseSharding() {
    cur_.Skip();
    const size_t start = cur_.Mark();
    // The same sharding text again (XLA repeats one sharding on many
    // instructions): the parsed value, whose device list is shared.
    const size_t extent = TextCursor::BalancedBracesEnd(cur_.text(), start);
    std::string_view key;
    if (extent != std::string_view::npos) {
      key = cur_.text().substr(start, extent - start);
      if (auto it = sharding_cache_.find(key); it != sharding_cache_.end()) {
        cur_.set_pos(extent);
        return it->second;
      }
    }
    // A sharding spans at most the module's devices: checked on the tile
    // assignment's dims, before its device ids are expanded.
    ShardingLimits limits;
    if (module_->num_partitions() > 1) {
      limits.max_devices = module_->num_partitions();
      limits.why = fmt::format("the module's num_partitions={}", module_->num_partitions());
    }
    size_t pos = start;
    try {
      HloSharding s = ParseHloShardingAt(cur_.text(), &pos, limits);
      CountExpandedDevices(s, start);
      cur_.set_pos(pos);
      if (pos == extent) sharding_cache_.emplace(key, s);
      return s;
    } catch (const ShardingSyntaxError& e) {
      cur_.FailAt(e.offset(), fmt::format("bad sharding: {}", e.what()));
    }
  }

  // Device ids are expanded once per distinct sharding (and iota replica
  // groups), up to options.max_expanded_device_ids in all: a file of
  // distinct 65,536-device shardings (half a megabyte each) is refused
  // before it takes gigabytes.
  void CountExpandedDevices(int64_t ids, size_t at) {
    expanded_device_ids_ += ids;
    if (expanded_device_ids_ > max_expanded_device_ids_) {
      cur_.FailAt(at, fmt::format("the module's distinct shardings and replica groups list more "
                                  "than {} device ids in all ({} MiB); identical shardings are "
                                  "stored once: repeat a few shardings rather than many "
                                  "different ones",
                                  max_expanded_device_ids_, max_expanded_device_ids_ * 8 >> 20));
    }
  }
  void CountExpandedDevices(const HloSharding& s, size_t at) {
    int64_t ids = 0;
    if (s.IsTuple()) {
      for (const HloSharding& e : s.tuple_elements()) {
        if (e.IsTiled()) ids += e.tile_assignment().num_elements();
      }
    } else if (s.IsTiled()) {
      ids = s.tile_assignment().num_elements();
    }
    CountExpandedDevices(ids, at);
  }

  // {{0,1},{2,3}}, {}, or the iota form [groups,size]<=[dims]T(perm).
  std::vector<std::vector<int64_t>> ParseReplicaGroups() {
    std::vector<std::vector<int64_t>> groups;
    if (cur_.Peek() == '[') {
      // Same syntax as an iota tile assignment: reuse the sharding parser.
      const size_t at = cur_.Mark();
      const size_t end = IotaEnd(at);
      const std::string prefix = "{devices=";
      const std::string text = fmt::format("{}{}}}", prefix, cur_.text().substr(at, end - at));
      size_t pos = 0;
      try {
        const TileAssignment t = ParseHloShardingAt(text, &pos).tile_assignment();
        CountExpandedDevices(t.num_elements(), at);
        if (t.num_dims() != 2) cur_.FailAt(at, "iota replica groups need [groups,size] dims");
        for (int64_t g = 0; g < t.dim(0); ++g) {
          groups.emplace_back(t.devices().begin() + g * t.dim(1),
                              t.devices().begin() + (g + 1) * t.dim(1));
        }
      } catch (const ShardingSyntaxError& e) {
        const size_t offset = e.offset() > prefix.size() ? e.offset() - prefix.size() : 0;
        cur_.FailAt(at + offset, fmt::format("bad iota replica groups: {}", e.what()));
      }
      cur_.set_pos(end);
      return groups;
    }
    cur_.Expect("{", "'{' to start replica_groups");
    if (cur_.TryConsume("}")) return groups;
    do {
      groups.push_back(cur_.ParseIntList("a replica group"));
    } while (cur_.TryConsume(","));
    cur_.Expect("}", "',' or '}' in replica_groups");
    return groups;
  }

  // End offset of "[..]<=[..]" plus an optional "T(..)".
  size_t IotaEnd(size_t at) {
    std::string_view t = cur_.text();
    size_t p = t.find(']', at);
    if (p == std::string_view::npos || t.substr(p + 1, 2) != "<=") {
      cur_.FailAt(at, "expected iota replica groups like [2,4]<=[8]");
    }
    p = t.find(']', p + 1);
    if (p == std::string_view::npos) cur_.FailAt(at, "unterminated iota replica groups");
    ++p;
    if (t.substr(p, 2) == "T(") {
      p = t.find(')', p);
      if (p == std::string_view::npos) cur_.FailAt(at, "unterminated iota transpose");
      ++p;
    }
    return p;
  }

  void ResolveCalls() {
    for (PendingCall& call : calls_) {
      std::vector<HloComputation*> called;
      for (const auto& [name, at] : call.names) {
        auto it = computations_.find(name);
        if (it == computations_.end()) {
          cur_.FailAt(at, fmt::format("unknown computation '{}'", name));
        }
        called.push_back(it->second);
      }
      call.instr->set_called_computations(std::move(called));
    }
  }

  HloTextCursor cur_;
  std::unique_ptr<HloModule> module_;
  std::unordered_map<std::string, size_t> names_;  // name -> offset, current computation
  // Layouts other than row-major, by instruction name (current computation),
  // for bitcast.
  std::unordered_map<std::string, std::vector<int64_t>> layouts_;
  std::vector<PendingCall> calls_;
  // By the name written in the text (a hash map: modules may hold thousands).
  std::unordered_map<std::string, HloComputation*> computations_;
  // Parsed shardings by their exact text (views into the module text).
  std::unordered_map<std::string_view, HloSharding> sharding_cache_;
  int64_t expanded_device_ids_ = 0;
  int64_t max_expanded_device_ids_;
};

}  // namespace

std::unique_ptr<HloModule> ParseHloModule(std::string_view text, const HloParseOptions& options) {
  std::unique_ptr<HloModule> module = HloTextParser(text, options).ParseModule();
  if (options.verify) {
    try {
      VerifyHloModule(*module);
    } catch (const Error& e) {
      if (options.source_name.empty()) throw;
      // Located messages start "line:col: ..."; others get a plain prefix.
      const bool located = std::isdigit(static_cast<unsigned char>(e.what()[0]));
      throw Error(fmt::format("{}:{}{}", options.source_name, located ? "" : " ", e.what()));
    }
  }
  return module;
}

std::unique_ptr<HloModule> ParseHloModuleFile(const std::string& path) {
  std::error_code error;
  WEFT_CHECK(std::filesystem::exists(path, error),
             "cannot read '{}'; give the path of an HLO text module", path);
  // A device (/dev/zero) was read until memory ran out; a file over the
  // limit is refused by its size, unread.
  constexpr int64_t kMaxHloTextBytes = int64_t{1} << 30;
  const std::string text = ReadInputFile(path, "HLO module", kMaxHloTextBytes);
  HloParseOptions options;
  options.source_name = path;
  return ParseHloModule(text, options);
}

Shape ParseShape(std::string_view text) {
  HloTextCursor cur(text, "");
  Shape s = cur.ParseShape();
  if (!cur.AtEnd()) cur.Expected("end of shape");
  return s;
}

}  // namespace weft
