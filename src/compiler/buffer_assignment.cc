// Buffer assignment (include/weft/compiler/buffer_assignment.h): liveness
// over each computation's sequence, static in-place and view decisions that
// match the executor's evaluators, then best-fit offsets per region.
#include "weft/compiler/buffer_assignment.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_set>

#include "weft/base/error.h"
#include "weft/compiler/all_to_all_layout.h"
#include "weft/compiler/dot_layout.h"
#include "weft/hlo/custom_call_targets.h"
#include "weft/hlo/opcode.h"

namespace weft::compiler {

bool IsContiguousBox(const std::vector<int64_t>& dims, const std::vector<int64_t>& sizes) {
  size_t k = 0;
  while (k < dims.size() && sizes[k] == 1) ++k;  // leading unit dims
  if (k == dims.size()) return true;
  for (size_t j = k + 1; j < dims.size(); ++j) {
    if (sizes[j] != dims[j]) return false;
  }
  return true;
}

namespace {

int64_t RoundUp(int64_t bytes) {
  return std::max<int64_t>(kBufferAlignment,
                           (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment);
}

// A backward attention call's backend_config says "has_dlse": true (an
// unreadable config is the executor's error to report).
bool HasDlse(const HloInstruction& instr) {
  const nlohmann::json j =
      nlohmann::json::parse(instr.attrs().backend_config, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("has_dlse") || !j["has_dlse"].is_boolean()) return false;
  return j["has_dlse"].get<bool>();
}

// runtime/eval_custom_call.cc's scratch for weft's attention calls, in the
// order it allocates it. The kernels compute in bf16 when q, k and v all are
// bf16, else in f32 (f32 copies of those that are not); lse and dlse are
// f32. A result leaf of another type is written to scratch of the kernel's
// type and converted; a forward that returns out alone still writes its lse;
// an operand of another type is converted into scratch. Not reserved: the
// copies with clean padding rows of a query-sharded backward whose last
// tile is uneven (they depend on the query offset's value at run time).
void AttentionScratch(const HloInstruction& instr, std::vector<Shape>& out) {
  const std::string& target = instr.attrs().custom_call_target;
  const bool backward = target == kFlexAttentionBackwardTarget;
  if (!backward && target != kFlexAttentionTarget) return;
  if (instr.operand_count() < (backward ? 6 : 3)) return;
  for (int64_t i = 0; i < instr.operand_count(); ++i) {
    if (!instr.operand(i)->shape().IsArray()) return;  // the executor refuses it
  }
  auto type = [&](int64_t i) { return instr.operand(i)->shape().element_type(); };
  const PrimitiveType bf16 = PrimitiveType::kBF16, f32 = PrimitiveType::kF32;
  const PrimitiveType kernel = type(0) == bf16 && type(1) == bf16 && type(2) == bf16 ? bf16 : f32;
  auto as = [&out](const Shape& s, PrimitiveType t) {
    if (s.IsArray() && s.element_type() != t) out.push_back(s.WithElementType(t));
  };
  const Shape& shape = instr.shape();
  const Shape& q = instr.operand(0)->shape();
  if (!backward && shape.IsTuple()) {
    if (shape.tuple_shapes().size() != 2) return;
    as(shape.tuple_shapes(0), kernel);
    as(shape.tuple_shapes(1), f32);
  } else if (!backward) {
    if (q.rank() < 3) return;
    as(shape, kernel);
    out.push_back(Shape(f32, {q.dimensions(0), q.dimensions(1), q.dimensions(2)}));  // lse
  } else {
    if (!shape.IsTuple() || shape.tuple_shapes().size() != 3) return;
    for (const Shape& s : shape.tuple_shapes()) as(s, kernel);
  }
  for (int64_t i = 0; i < 3; ++i) as(instr.operand(i)->shape(), kernel);
  if (!backward) return;
  as(instr.operand(3)->shape(), kernel);  // out
  as(instr.operand(4)->shape(), f32);     // lse
  as(instr.operand(5)->shape(), kernel);  // dout
  if (HasDlse(instr) && instr.operand_count() > 6) as(instr.operand(6)->shape(), f32);
}

}  // namespace

bool TakesStep(const HloInstruction& instr) {
  const bool root = instr.parent() != nullptr && instr.parent()->root_instruction() == &instr;
  if (root) return true;
  if (instr.opcode() == HloOpcode::kConstant) return false;
  if (instr.opcode() != HloOpcode::kGetTupleElement || !instr.shape().IsArray() ||
      instr.operand(0)->opcode() == HloOpcode::kConstant) {
    return true;
  }
  for (const HloInstruction* user : instr.users()) {
    switch (user->opcode()) {
      case HloOpcode::kTuple:
      case HloOpcode::kGetTupleElement:
      case HloOpcode::kCopy:
      case HloOpcode::kWhile:
      case HloOpcode::kCall:
      case HloOpcode::kConditional:
        return true;
      default:
        break;
    }
  }
  return false;
}

std::vector<Shape> InstructionScratch(const HloInstruction& instr) {
  std::vector<Shape> out;
  const Shape& shape = instr.shape();
  switch (instr.opcode()) {
    case HloOpcode::kDot: {
      // eval_dot.cc: the packed operands of compiler::PlanDotLayout (both
      // where oneDNN might refuse the in-place strides: dot_layout.h), in
      // the GEMM's element type. A bf16 GEMM (IsBf16Gemm) reads and writes
      // bf16 as it is; other float dots compute on f32 copies.
      const Shape& lhs = instr.operand(0)->shape();
      const Shape& rhs = instr.operand(1)->shape();
      if (!IsFloatingPoint(shape.element_type())) break;
      const DotLayout layout = PlanDotLayout(instr.attrs().dot, lhs.dimensions(), rhs.dimensions());
      const bool pack_lhs = layout.pack_lhs() || layout.may_pack_both;
      const bool pack_rhs = layout.pack_rhs() || layout.may_pack_both;
      if (IsBf16Gemm(lhs.element_type(), rhs.element_type(), shape.element_type())) {
        if (pack_lhs) out.push_back(lhs);
        if (pack_rhs) out.push_back(rhs);
        break;
      }
      const PrimitiveType f32 = PrimitiveType::kF32;
      if (lhs.element_type() != f32) out.push_back(lhs.WithElementType(f32));
      if (pack_lhs) out.push_back(lhs.WithElementType(f32));
      if (rhs.element_type() != f32) out.push_back(rhs.WithElementType(f32));
      if (pack_rhs) out.push_back(rhs.WithElementType(f32));
      if (shape.element_type() != f32) out.push_back(shape.WithElementType(f32));
      break;
    }
    case HloOpcode::kFusion: {
      // An output fusion's scratch is its dot's (eval_fusion.cc runs the
      // dot with the chain as GEMM post-ops, packing as PlanDotLayout says):
      // the dot at the end of the root's add / multiply chain.
      if (instr.attrs().fusion_kind != FusionKind::kOutput ||
          instr.called_computations().size() != 1 || instr.called_computations()[0] == nullptr) {
        break;
      }
      const HloInstruction* x = instr.called_computations()[0]->root_instruction();
      while (x != nullptr &&
             (x->opcode() == HloOpcode::kAdd || x->opcode() == HloOpcode::kMultiply) &&
             x->operand_count() == 2) {
        x = x->operand(0)->opcode() == HloOpcode::kParameter ? x->operand(1) : x->operand(0);
      }
      if (x != nullptr && x->opcode() == HloOpcode::kDot) return InstructionScratch(*x);
      break;
    }
    case HloOpcode::kCustomCall:
      AttentionScratch(instr, out);
      break;
    default:
      break;
  }
  return out;
}

namespace {

// One buffer while a computation is walked.
struct Buf {
  bool external = false;  // outside the region (parameters, constants)
  bool writable = true;   // may be taken over in place
  int64_t real_bytes = 0;
  int64_t size = 0;  // under the size function, rounded
  int64_t start = 0, last = 0;
  AssignedBuffer::Kind kind = AssignedBuffer::Kind::kValue;
  const HloInstruction* instr = nullptr;
  int64_t leaf = 0;
};

// One leaf of a value: a buffer, and where in it (-1: not known statically).
struct VLeaf {
  int32_t buffer = -1;
  int64_t byte_offset = 0;
  int64_t real_bytes = 0;
};

class ComputationAssigner {
 public:
  ComputationAssigner(const HloComputation& c, std::vector<HloInstruction*> sequence, bool is_entry,
                      bool params_writable,
                      const std::unordered_map<const HloComputation*, ComputationAssignment>& done)
      : c_(c), is_entry_(is_entry), params_writable_(params_writable), done_(done) {
    out_.computation = &c;
    out_.sequence = std::move(sequence);
  }

  ComputationAssignment Run() {
    const std::vector<HloInstruction*>& seq = out_.sequence;
    const int64_t n = static_cast<int64_t>(seq.size());
    std::unordered_map<const HloInstruction*, int64_t> pos;
    for (int64_t i = 0; i < n; ++i) pos[seq[i]] = i;
    WEFT_INTERNAL_CHECK(pos.count(c_.root_instruction()), "the sequence of '{}' lacks its root",
                        c_.name());
    // The last position that reads each value (the root: after the end).
    for (int64_t i = 0; i < n; ++i) {
      value_last_[seq[i]] = i;
      for (const HloInstruction* op : seq[i]->operands()) {
        WEFT_INTERNAL_CHECK(pos.count(op) && pos.at(op) < i,
                            "the sequence of '{}' runs '{}' before its operand '{}'", c_.name(),
                            seq[i]->name(), op->name());
        value_last_[op] = std::max(value_last_[op], i);
      }
    }
    value_last_[c_.root_instruction()] = n;
    for (int64_t t = 0; t < n; ++t) Step(t, *seq[t]);
    Place(n);
    return std::move(out_);
  }

 private:
  int32_t NewBuf(Buf b) {
    bufs_.push_back(b);
    return static_cast<int32_t>(bufs_.size() - 1);
  }

  // A buffer of `size` bytes live only at t (an instruction's scratch or
  // nested region).
  int32_t NewBufAt(int64_t size, int64_t t, AssignedBuffer::Kind kind,
                   const HloInstruction& instr) {
    Buf b;
    b.size = size;
    b.start = b.last = t;
    b.kind = kind;
    b.instr = &instr;
    return NewBuf(b);
  }

  int64_t Size(const Shape& s) const { return RoundUp(s.ByteSize()); }

  // A region buffer for leaf `leaf` of `instr` at t.
  VLeaf Fresh(const HloInstruction& instr, int64_t leaf, const Shape& s, int64_t t) {
    Buf b;
    b.real_bytes = s.ByteSize();
    b.size = Size(s);
    b.start = t;
    b.last = value_last_.at(&instr);
    b.instr = &instr;
    b.leaf = leaf;
    return VLeaf{NewBuf(b), 0, b.real_bytes};
  }

  bool Dies(int32_t buffer, int64_t t) const {
    const Buf& b = bufs_[buffer];
    return b.writable && b.last == t;
  }

  // Whether `leaf` of operand `i` can be taken over by a result of
  // `real_bytes` at t: its buffer dies here, is writable, is all of this
  // leaf, and no other operand leaf (nor an earlier result leaf) uses it.
  bool CanTake(const HloInstruction& instr, int64_t i, int64_t leaf, int64_t real_bytes,
               int64_t t) const {
    const VLeaf& l = leaves_.at(instr.operand(i))[leaf];
    const Buf& b = bufs_[l.buffer];
    if (!Dies(l.buffer, t) || l.byte_offset != 0 || l.real_bytes != b.real_bytes ||
        b.real_bytes != real_bytes) {
      return false;
    }
    if (taken_.count(l.buffer)) return false;
    int uses = 0;
    for (const HloInstruction* op : instr.operands()) {
      for (const VLeaf& o : leaves_.at(op)) uses += o.buffer == l.buffer;
    }
    return uses == 1;
  }

  // Whether a while body returns leaf k of its parameter unchanged: its root
  // is a tuple whose element k is get-tuple-element k of the parameter (an
  // array). Such a leaf is never written by the loop (the root reads it, so
  // it never dies inside the body; the condition writes nothing).
  static bool PassedThrough(const HloComputation& body, size_t k) {
    const HloInstruction* root = body.root_instruction();
    if (root->opcode() != HloOpcode::kTuple || !root->shape().IsTuple()) return false;
    for (const HloInstruction* e : root->operands()) {
      if (!e->shape().IsArray()) return false;
    }
    if (k >= static_cast<size_t>(root->operand_count())) return false;
    const HloInstruction* e = root->operand(static_cast<int64_t>(k));
    while (e->opcode() == HloOpcode::kCopy) e = e->operand(0);
    return e->opcode() == HloOpcode::kGetTupleElement &&
           e->tuple_index() == static_cast<int64_t>(k) &&
           e->operand(0)->opcode() == HloOpcode::kParameter;
  }

  void Extend(int32_t buffer, const HloInstruction& instr) {
    bufs_[buffer].last = std::max(bufs_[buffer].last, value_last_.at(&instr));
  }

  // Result leaves that share operand bytes.
  void Forward(const HloInstruction& instr, std::vector<VLeaf> v, InstructionAssignment& ia) {
    for (const VLeaf& l : v) {
      Extend(l.buffer, instr);
      ia.leaves.push_back(LeafAssignment{LeafAssignment::Kind::kForward, -1, -1, 0, l.buffer});
    }
    leaves_[&instr] = std::move(v);
  }

  // A result leaf: in place on the first candidate that can be taken, else new.
  VLeaf NewOrInPlace(const HloInstruction& instr, int64_t leaf, const Shape& s,
                     const std::vector<int64_t>& candidates, int64_t t, InstructionAssignment& ia) {
    for (int64_t i : candidates) {
      if (i >= instr.operand_count() || leaves_.at(instr.operand(i)).size() != 1) continue;
      if (!CanTake(instr, i, 0, s.ByteSize(), t)) continue;
      const VLeaf l = leaves_.at(instr.operand(i))[0];
      taken_.insert(l.buffer);
      Extend(l.buffer, instr);
      ia.leaves.push_back(
          LeafAssignment{LeafAssignment::Kind::kInPlace, -1, static_cast<int32_t>(i), 0, l.buffer});
      return l;
    }
    const VLeaf l = Fresh(instr, leaf, s, t);
    ia.leaves.push_back(LeafAssignment{LeafAssignment::Kind::kNew, -1, -1, 0, l.buffer});
    return l;
  }

  // `instr`'s result as operand `i`'s one leaf, `byte_offset` bytes into it
  // (-1: not known statically).
  std::vector<VLeaf> ViewOf(const HloInstruction& instr, int64_t i, int64_t byte_offset) const {
    VLeaf l = leaves_.at(instr.operand(i))[0];
    if (l.byte_offset < 0 || byte_offset < 0) {
      l.byte_offset = -1;
    } else {
      l.byte_offset += byte_offset;
    }
    l.real_bytes = instr.shape().ByteSize();
    return std::vector<VLeaf>{l};
  }

  // A parameter's leaves: external buffers, writable in a callee when the
  // caller allows it.
  void AssignParameter(int64_t t, const HloInstruction& instr, InstructionAssignment& ia) {
    const Shape& shape = instr.shape();
    std::vector<VLeaf> v;
    int64_t k = 0;
    for (const Shape& s : shape.Leaves()) {
      Buf b;
      b.external = true;
      b.writable = !is_entry_ && params_writable_;
      b.real_bytes = s.ByteSize();
      b.size = Size(s);
      b.start = t;
      b.last = value_last_.at(&instr);
      b.instr = &instr;
      b.leaf = k++;
      v.push_back(VLeaf{NewBuf(b), 0, b.real_bytes});
    }
    leaves_[&instr] = v;
    for (const VLeaf& l : v) {
      ia.leaves.push_back(LeafAssignment{LeafAssignment::Kind::kForward, -1, -1, 0, l.buffer});
    }
  }

  // A constant: an external, read-only buffer.
  void AssignConstant(int64_t t, const HloInstruction& instr, InstructionAssignment& ia) {
    const Shape& shape = instr.shape();
    Buf b;
    b.external = true;
    b.writable = false;
    b.real_bytes = shape.ByteSize();
    b.size = Size(shape);
    b.start = t;
    b.last = value_last_.at(&instr);
    b.instr = &instr;
    const VLeaf l{NewBuf(b), 0, b.real_bytes};
    leaves_[&instr] = {l};
    ia.leaves.push_back(LeafAssignment{LeafAssignment::Kind::kForward, -1, -1, 0, l.buffer});
  }

  // While, call and conditional: the result's leaves (a while's in place of
  // its init where the loop allows) and a nested region for the callees.
  void AssignCalls(int64_t t, const HloInstruction& instr, InstructionAssignment& ia) {
    const HloOpcode op = instr.opcode();
    const Shape& shape = instr.shape();
    std::vector<VLeaf> v;
    int64_t nested = 0;
    for (const HloComputation* callee : instr.called_computations()) {
      auto it = done_.find(callee);
      WEFT_INTERNAL_CHECK(it != done_.end(), "'{}' is assigned before its callee '{}'", c_.name(),
                          callee->name());
      nested = std::max(nested, it->second.size);
    }
    if (op == HloOpcode::kWhile) {
      const std::vector<VLeaf>& init = leaves_.at(instr.operand(0));
      std::vector<Shape> shapes = shape.Leaves();
      for (size_t k = 0; k < init.size(); ++k) {
        if (PassedThrough(*instr.while_body(), k)) {
          // The loop never writes this leaf: it stays where the init is.
          Extend(init[k].buffer, instr);
          ia.leaves.push_back(LeafAssignment{LeafAssignment::Kind::kForward, -1, -1,
                                             static_cast<int32_t>(k), init[k].buffer});
          v.push_back(init[k]);
        } else if (CanTake(instr, 0, static_cast<int64_t>(k), shapes[k].ByteSize(), t)) {
          taken_.insert(init[k].buffer);
          Extend(init[k].buffer, instr);
          ia.leaves.push_back(LeafAssignment{LeafAssignment::Kind::kInPlace, -1, 0,
                                             static_cast<int32_t>(k), init[k].buffer});
          v.push_back(init[k]);
        } else {
          v.push_back(Fresh(instr, static_cast<int64_t>(k), shapes[k], t));
          ia.leaves.push_back(
              LeafAssignment{LeafAssignment::Kind::kNew, -1, -1, 0, v.back().buffer});
        }
      }
    } else {
      int64_t k = 0;
      for (const Shape& s : shape.Leaves()) {
        v.push_back(Fresh(instr, k++, s, t));
        ia.leaves.push_back(LeafAssignment{LeafAssignment::Kind::kNew, -1, -1, 0, v.back().buffer});
      }
    }
    leaves_[&instr] = std::move(v);
    if (nested > 0) nested_[&instr] = NewBufAt(nested, t, AssignedBuffer::Kind::kNested, instr);
  }

  // Results in buffers of their own, or in place of a dying operand, and
  // the instruction's scratch.
  void AssignOwnOrInPlace(int64_t t, const HloInstruction& instr, InstructionAssignment& ia) {
    const HloOpcode op = instr.opcode();
    const Shape& shape = instr.shape();
    std::vector<int64_t> candidates;
    if (IsElementwise(op) && op != HloOpcode::kCompare) {
      if (op == HloOpcode::kSelect) {
        candidates = {1, 2};
      } else if (op == HloOpcode::kClamp) {
        candidates = {1};
      } else if (IsElementwiseUnary(op)) {
        candidates = {0};
      } else {
        candidates = {0, 1};
      }
    } else if (op == HloOpcode::kDynamicUpdateSlice || op == HloOpcode::kScatter ||
               op == HloOpcode::kCollectivePermute ||
               (op == HloOpcode::kAllToAll && shape.IsArray() &&
                TransposeWrittenByAllToAll(instr) == nullptr)) {
      candidates = {0};
    }
    std::vector<VLeaf> v;
    int64_t k = 0;
    for (const Shape& s : shape.Leaves()) {
      std::vector<int64_t> c = candidates;
      if (op == HloOpcode::kAllReduce || op == HloOpcode::kScatter) c = {k};  // leaf k, operand k
      v.push_back(NewOrInPlace(instr, k, s, c, t, ia));
      ++k;
    }
    leaves_[&instr] = std::move(v);
    int64_t scratch = 0;
    for (const Shape& s : InstructionScratch(instr)) scratch += Size(s);
    if (scratch > 0) {
      scratch_[&instr] = NewBufAt(scratch, t, AssignedBuffer::Kind::kScratch, instr);
    }
  }

  void Step(int64_t t, const HloInstruction& instr) {
    InstructionAssignment& ia = out_.instructions[&instr];
    ia.position = t;
    taken_.clear();
    for (const HloInstruction* op : instr.operands()) {
      const std::vector<VLeaf>& v = leaves_.at(op);
      ia.operand_dies.push_back(!v.empty() && v[0].buffer >= 0 && Dies(v[0].buffer, t));
    }
    const HloOpcode op = instr.opcode();
    const Shape& shape = instr.shape();
    switch (op) {
      case HloOpcode::kParameter:
        return AssignParameter(t, instr, ia);
      case HloOpcode::kConstant:
        return AssignConstant(t, instr, ia);
      case HloOpcode::kTuple: {
        std::vector<VLeaf> v;
        for (const HloInstruction* o : instr.operands()) {
          const std::vector<VLeaf>& ov = leaves_.at(o);
          v.insert(v.end(), ov.begin(), ov.end());
        }
        return Forward(instr, std::move(v), ia);
      }
      case HloOpcode::kGetTupleElement: {
        const Shape& tuple = instr.operand(0)->shape();
        int64_t begin = 0;
        for (int64_t k = 0; k < instr.tuple_index(); ++k) {
          begin += tuple.tuple_shapes(k).LeafCount();
        }
        const std::vector<VLeaf>& ov = leaves_.at(instr.operand(0));
        return Forward(
            instr, std::vector<VLeaf>(ov.begin() + begin, ov.begin() + begin + shape.LeafCount()),
            ia);
      }
      case HloOpcode::kCopy:  // the executor shares the bytes (values are immutable)
        return Forward(instr, leaves_.at(instr.operand(0)), ia);
      case HloOpcode::kReshape:
      case HloOpcode::kBitcastConvert:  // the executor reinterprets the same bytes
        return Forward(instr, ViewOf(instr, 0, 0), ia);
      case HloOpcode::kTranspose:  // the all-to-all before it wrote its layout
        if (ForwardsAllToAll(instr)) return Forward(instr, ViewOf(instr, 0, 0), ia);
        break;
      case HloOpcode::kBroadcast: {
        const std::vector<int64_t>& dims = instr.dimensions();
        if (instr.operand(0)->shape().ElementsCount() == shape.ElementsCount() &&
            std::is_sorted(dims.begin(), dims.end())) {
          return Forward(instr, ViewOf(instr, 0, 0), ia);
        }
        break;
      }
      case HloOpcode::kConvert:
        if (instr.operand(0)->shape().element_type() == shape.element_type()) {
          return Forward(instr, ViewOf(instr, 0, 0), ia);
        }
        break;
      case HloOpcode::kSlice:
      case HloOpcode::kDynamicSlice: {  // eval_shape_ops.cc SliceOf
        const Shape& x = instr.operand(0)->shape();
        bool unit_strides = true;
        int64_t offset = 0;
        if (op == HloOpcode::kSlice) {
          int64_t stride = 1;
          std::vector<int64_t> starts;
          for (const SliceDim& s : instr.attrs().slice) {
            unit_strides &= s.stride == 1;
            starts.push_back(s.start);
          }
          for (int64_t d = x.rank() - 1; d >= 0; --d) {
            offset += starts[d] * stride;
            stride *= x.dimensions(d);
          }
          offset *= ByteWidth(x.element_type());
        } else {
          offset = -1;
        }
        if (unit_strides && IsContiguousBox(x.dimensions(), shape.dimensions()) &&
            (!ia.operand_dies[0] || 2 * shape.ByteSize() >= x.ByteSize())) {
          return Forward(instr, ViewOf(instr, 0, offset), ia);
        }
        break;
      }
      case HloOpcode::kWhile:
      case HloOpcode::kCall:
      case HloOpcode::kConditional:  // a conditional's region fits its largest branch
        return AssignCalls(t, instr, ia);
      default:
        break;
    }
    AssignOwnOrInPlace(t, instr, ia);
  }

  // Offsets: largest first, each at the lowest offset free over its range.
  void Place(int64_t n) {
    std::vector<int32_t> order;
    for (size_t i = 0; i < bufs_.size(); ++i) {
      if (!bufs_[i].external) order.push_back(static_cast<int32_t>(i));
    }
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      if (bufs_[a].size != bufs_[b].size) return bufs_[a].size > bufs_[b].size;
      return bufs_[a].start < bufs_[b].start;
    });
    std::vector<int64_t> offset(bufs_.size(), -1);
    std::vector<int32_t> placed;
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (int32_t id : order) {
      const Buf& b = bufs_[id];
      busy.clear();
      for (int32_t p : placed) {
        const Buf& q = bufs_[p];
        if (q.start <= b.last && b.start <= q.last)
          busy.emplace_back(offset[p], offset[p] + q.size);
      }
      std::sort(busy.begin(), busy.end());
      int64_t at = 0;
      for (const auto& [lo, hi] : busy) {
        if (lo >= at + b.size) break;
        at = std::max(at, hi);
      }
      offset[id] = at;
      placed.push_back(id);
      out_.size = std::max(out_.size, at + b.size);
    }
    // Region buffers renumbered densely.
    std::vector<int32_t> index(bufs_.size(), -1);
    for (size_t i = 0; i < bufs_.size(); ++i) {
      const Buf& b = bufs_[i];
      if (b.external) continue;
      index[i] = static_cast<int32_t>(out_.buffers.size());
      out_.buffers.push_back(
          AssignedBuffer{b.kind, b.instr, b.leaf, offset[i], b.size, b.start, std::min(b.last, n)});
    }
    std::vector<int32_t> external(bufs_.size(), -1);
    for (size_t i = 0; i < bufs_.size(); ++i) {
      const Buf& b = bufs_[i];
      if (!b.external) continue;
      external[i] = static_cast<int32_t>(out_.external.size());
      out_.external.push_back(
          AssignedBuffer{b.kind, b.instr, b.leaf, -1, b.size, b.start, std::min(b.last, n)});
    }
    for (auto& [instr, ia] : out_.instructions) {
      for (LeafAssignment& l : ia.leaves) {
        if (l.buffer < 0) continue;
        l.external = external[l.buffer];
        l.offset = index[l.buffer] >= 0 ? offset[l.buffer] : -1;
        if (l.kind == LeafAssignment::Kind::kForward) l.offset = -1;
        l.buffer = index[l.buffer];
      }
    }
    for (const auto& [instr, id] : scratch_) {
      InstructionAssignment& ia = out_.instructions.at(instr);
      ia.scratch_offset = offset[id];
      ia.scratch_bytes = bufs_[id].size;
    }
    for (const auto& [instr, id] : nested_) out_.instructions.at(instr).nested_offset = offset[id];
    std::vector<int64_t> delta(n + 2, 0);
    for (const AssignedBuffer& b : out_.buffers) {
      delta[b.start] += b.size;
      delta[b.end + 1] -= b.size;
    }
    int64_t live = 0;
    for (int64_t p = 0; p <= n; ++p) {
      live += delta[p];
      out_.max_live_bytes = std::max(out_.max_live_bytes, live);
    }
  }

  const HloComputation& c_;
  const bool is_entry_, params_writable_;
  const std::unordered_map<const HloComputation*, ComputationAssignment>& done_;
  ComputationAssignment out_;
  std::vector<Buf> bufs_;
  std::unordered_map<const HloInstruction*, int64_t> value_last_;
  std::unordered_map<const HloInstruction*, std::vector<VLeaf>> leaves_;
  std::unordered_map<const HloInstruction*, int32_t> scratch_, nested_;
  std::unordered_set<int32_t> taken_;
};

}  // namespace

const ComputationAssignment& BufferAssignment::Of(const HloComputation& computation) const {
  auto it = computations_.find(&computation);
  WEFT_INTERNAL_CHECK(it != computations_.end(), "computation '{}' has no buffer assignment",
                      computation.name());
  return it->second;
}

const InstructionAssignment& BufferAssignment::Of(const HloInstruction& instr) const {
  auto it = index_.find(&instr);
  WEFT_INTERNAL_CHECK(it != index_.end(), "instruction '{}' has no buffer assignment",
                      instr.name());
  return *it->second;
}

BufferAssignment AssignBuffers(const HloModule& module, const SequenceFunction& sequence) {
  const HloComputation* entry = module.entry_computation();
  WEFT_INTERNAL_CHECK(entry != nullptr, "module '{}' has no entry computation", module.name());
  // The computations the executor runs (entry, while, call and conditional
  // callees) and
  // whether their parameters may be written (only a while body's carry).
  std::unordered_map<const HloComputation*, bool> writable;
  std::vector<const HloComputation*> stack = {entry};
  writable[entry] = false;
  while (!stack.empty()) {
    const HloComputation* c = stack.back();
    stack.pop_back();
    for (const HloInstruction* instr : c->instructions()) {
      if (!RunsCalledComputations(instr->opcode())) continue;
      for (const HloComputation* callee : instr->called_computations()) {
        const bool w = instr->opcode() == HloOpcode::kWhile && callee == instr->while_body();
        auto [it, fresh] = writable.emplace(callee, w);
        if (!fresh) {
          it->second = it->second && w;
        } else {
          stack.push_back(callee);
        }
      }
    }
  }
  BufferAssignment out;
  for (const HloComputation* c : module.MakeComputationPostOrder()) {  // callees first
    auto it = writable.find(c);
    if (it == writable.end()) continue;
    ComputationAssigner assigner(*c, sequence(*c), c == entry, it->second, out.computations_);
    out.computations_.emplace(c, assigner.Run());
  }
  for (const auto& [c, ca] : out.computations_) {
    for (const auto& [instr, ia] : ca.instructions) out.index_[instr] = &ia;
  }
  const ComputationAssignment& e = out.computations_.at(entry);
  out.arena_bytes_ = e.size;
  auto bytes = [&](const Shape& s) { return RoundUp(s.ByteSize()); };
  for (int64_t p = 0; p < entry->num_parameters(); ++p) {
    for (const Shape& s : entry->parameter_instruction(p)->shape().Leaves()) {
      out.input_bytes_ += bytes(s);
    }
  }
  // Root leaves in the arena are copied out; those that are entry
  // parameters or constants are returned as they are. Follow forwards.
  const HloInstruction* root = entry->root_instruction();
  const std::vector<Shape> leaves = root->shape().Leaves();
  const InstructionAssignment& ra = e.instructions.at(root);
  for (size_t k = 0; k < leaves.size(); ++k) {
    if (ra.leaves[k].buffer >= 0) out.output_bytes_ += bytes(leaves[k]);
  }
  return out;
}

}  // namespace weft::compiler
