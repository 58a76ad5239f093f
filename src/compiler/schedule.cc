#include "weft/compiler/schedule.h"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <utility>

#include "weft/base/error.h"
#include "weft/compiler/buffer_assignment.h"
#include "weft/hlo/opcode.h"

namespace weft::compiler {
namespace {

// Instructions that allocate nothing: their result is bytes of an operand
// (or outside the computation's region: parameters, constants).
bool Forwards(const HloInstruction& instr) {
  switch (instr.opcode()) {
    case HloOpcode::kParameter:
    case HloOpcode::kConstant:
    case HloOpcode::kTuple:
    case HloOpcode::kGetTupleElement:
    case HloOpcode::kCopy:
    case HloOpcode::kReshape:
      return true;
    case HloOpcode::kConvert:
      return instr.operand(0)->shape().element_type() == instr.shape().element_type();
    case HloOpcode::kBroadcast: {
      const std::vector<int64_t>& dims = instr.dimensions();
      return instr.operand(0)->shape().ElementsCount() == instr.shape().ElementsCount() &&
             std::is_sorted(dims.begin(), dims.end());
    }
    default:
      return false;
  }
}

// The operands whose buffer the result may take over when it dies here
// (buffer_assignment.cc's in-place candidates).
std::vector<int64_t> InPlaceCandidates(const HloInstruction& instr) {
  const HloOpcode op = instr.opcode();
  if (IsElementwise(op) && op != HloOpcode::kCompare) {
    if (op == HloOpcode::kSelect) return {1, 2};
    if (op == HloOpcode::kClamp) return {1};
    if (IsElementwiseUnary(op)) return {0};
    return {0, 1};
  }
  if (op == HloOpcode::kDynamicUpdateSlice || op == HloOpcode::kScatter ||
      op == HloOpcode::kCollectivePermute || op == HloOpcode::kAllReduce) {
    return {0};
  }
  return {};
}

int64_t Bytes(const Shape& shape) {
  int64_t total = 0;
  for (const Shape& s : shape.Leaves()) {  // rounded as buffer assignment rounds
    total += (s.ByteSize() + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  }
  return total;
}

// The computation's instructions (post-order) and, per instruction by
// position: its distinct operands and users, the buffers it reads (sources
// of its operands), its own bytes, and the buffers the root returns.
struct Graph {
  std::vector<HloInstruction*> post;
  std::unordered_map<const HloInstruction*, int32_t> index;  // lookup only
  std::vector<std::vector<int32_t>> operands, users, reads, readers;
  std::vector<int64_t> bytes;
  // Bytes needed only while the instruction runs (InstructionScratch).
  std::vector<int64_t> transient;
  std::vector<bool> live_out, early;
  // Per instruction: operands (positions) whose buffer it may take over.
  std::vector<std::vector<int32_t>> in_place;

  explicit Graph(const HloComputation& c) : post(c.MakeInstructionPostOrder()) {
    const size_t n = post.size();
    index.reserve(n);
    for (size_t i = 0; i < n; ++i) index.emplace(post[i], static_cast<int32_t>(i));
    operands.resize(n);
    users.resize(n);
    reads.resize(n);
    readers.resize(n);
    bytes.assign(n, 0);
    transient.assign(n, 0);
    live_out.assign(n, false);
    early.assign(n, false);
    in_place.resize(n);
    std::vector<std::vector<int32_t>> sources(n);  // buffers a value may be
    for (size_t i = 0; i < n; ++i) {
      const HloInstruction& instr = *post[i];
      for (const HloInstruction* o : instr.operands()) {
        const int32_t k = index.at(o);  // operands precede in post-order
        if (std::find(operands[i].begin(), operands[i].end(), k) == operands[i].end()) {
          operands[i].push_back(k);
          users[k].push_back(static_cast<int32_t>(i));
        }
      }
      const HloOpcode op = instr.opcode();
      early[i] = op == HloOpcode::kParameter ||
                 (op == HloOpcode::kGetTupleElement && early[operands[i][0]]);
      if (op == HloOpcode::kParameter || op == HloOpcode::kConstant) {
        // outside the region
      } else if (op == HloOpcode::kGetTupleElement) {
        const HloInstruction* t = instr.operand(0);
        sources[i] = t->opcode() == HloOpcode::kTuple
                         ? sources[index.at(t->operand(instr.tuple_index()))]
                         : sources[index.at(t)];
      } else if (Forwards(instr)) {
        for (int32_t k : operands[i]) {
          sources[i].insert(sources[i].end(), sources[k].begin(), sources[k].end());
        }
      } else {
        sources[i] = {static_cast<int32_t>(i)};
        bytes[i] = Bytes(instr.shape());
        for (const Shape& sh : InstructionScratch(instr)) transient[i] += Bytes(sh);
        if (instr.shape().IsArray()) {
          for (int64_t c : InPlaceCandidates(instr)) {
            if (c >= instr.operand_count()) continue;
            const HloInstruction* o = instr.operand(c);
            const int32_t k = index.at(o);
            int uses = 0;
            for (const HloInstruction* x : instr.operands()) uses += x == o;
            if (uses == 1 && !Forwards(*o) && o->shape().IsArray() && bytes[k] == bytes[i]) {
              in_place[i].push_back(k);
            }
          }
        }
      }
      std::sort(sources[i].begin(), sources[i].end());
      sources[i].erase(std::unique(sources[i].begin(), sources[i].end()), sources[i].end());
      for (int32_t k : operands[i]) {
        reads[i].insert(reads[i].end(), sources[k].begin(), sources[k].end());
      }
      if (op == HloOpcode::kGetTupleElement) reads[i] = sources[i];
      std::sort(reads[i].begin(), reads[i].end());
      reads[i].erase(std::unique(reads[i].begin(), reads[i].end()), reads[i].end());
      for (int32_t s : reads[i]) readers[s].push_back(static_cast<int32_t>(i));
    }
    if (n > 0) {
      for (int32_t s : sources[n - 1]) live_out[s] = true;  // the root is last
    }
  }

  std::vector<HloInstruction*> Hoisted() const {
    std::vector<HloInstruction*> order;
    order.reserve(post.size());
    for (size_t i = 0; i < post.size(); ++i) {
      if (early[i]) order.push_back(post[i]);
    }
    for (size_t i = 0; i < post.size(); ++i) {
      if (!early[i]) order.push_back(post[i]);
    }
    return order;
  }

  int64_t Peak(const std::vector<HloInstruction*>& sequence) const {
    std::vector<int32_t> remaining(post.size());
    for (size_t s = 0; s < post.size(); ++s) remaining[s] = static_cast<int32_t>(readers[s].size());
    std::vector<bool> taken(post.size(), false);  // buffers a result took over
    int64_t live = 0, peak = 0;
    for (const HloInstruction* instr : sequence) {
      const int32_t i = index.at(instr);
      int64_t reused = 0;
      for (int32_t k : in_place[i]) {
        if (remaining[k] == 1 && !live_out[k] && !taken[k]) {
          taken[k] = true;
          reused = bytes[k];
          break;
        }
      }
      live += bytes[i] - reused;
      peak = std::max(peak, live + transient[i]);
      if (bytes[i] > 0 && readers[i].empty() && !live_out[i]) live -= bytes[i];
      for (int32_t s : reads[i]) {
        if (--remaining[s] == 0 && !live_out[s] && !taken[s]) live -= bytes[s];
      }
    }
    return peak;
  }

  std::vector<HloInstruction*> ListSchedule() const {
    const size_t n = post.size();
    std::vector<int32_t> remaining(n), pending(n);
    std::vector<int64_t> priority(n, 0);
    std::vector<bool> done(n, false);
    for (size_t i = 0; i < n; ++i) {
      remaining[i] = static_cast<int32_t>(readers[i].size());
      pending[i] = static_cast<int32_t>(operands[i].size());
    }
    // Sources (they read no buffer of the region: a broadcast of a
    // constant, an iota, an all-gather of a parameter) wait until some user
    // of theirs waits on sources alone, so they are made when needed, not
    // as early as they could be.
    std::vector<bool> source(n, false), released(n, false);
    std::vector<int32_t> waiting(n, 0);  // operands not run that are not sources
    for (size_t i = 0; i < n; ++i) {
      source[i] = !early[i] && bytes[i] > 0 && reads[i].empty() && !users[i].empty();
    }
    for (size_t i = 0; i < n; ++i) {
      for (int32_t k : operands[i]) waiting[i] += !source[k];
    }
    // Max-heap on (net bytes freed, earlier post-order position).
    using Entry = std::pair<int64_t, int32_t>;  // (priority, -position)
    std::priority_queue<Entry> ready;
    auto prioritize = [&](int32_t i) {
      if (source[i] && !released[i]) return;
      int64_t freed = 0;
      for (int32_t s : reads[i]) {
        if (remaining[s] == 1 && !live_out[s]) freed += bytes[s];
      }
      priority[i] = freed - bytes[i];
      ready.emplace(priority[i], -i);
    };
    auto release_sources_of = [&](int32_t u) {
      for (int32_t k : operands[u]) {
        if (source[k] && !released[k]) {
          released[k] = true;
          if (pending[k] == 0 && !done[k]) prioritize(k);
        }
      }
    };
    std::vector<HloInstruction*> order;
    order.reserve(n);
    auto run = [&](int32_t i) {
      done[i] = true;
      order.push_back(post[i]);
      for (int32_t s : reads[i]) {
        if (--remaining[s] != 1) continue;
        for (int32_t u : readers[s]) {  // the last reader now frees s
          if (!done[u]) {
            if (pending[u] == 0) prioritize(u);
            break;
          }
        }
      }
      for (int32_t u : users[i]) {
        if (--pending[u] == 0 && !early[u]) prioritize(u);
        if (!source[i] && --waiting[u] == 0) release_sources_of(u);
      }
    };
    for (size_t i = 0; i < n; ++i) {
      if (early[i]) run(static_cast<int32_t>(i));
    }
    for (size_t i = 0; i < n; ++i) {
      if (!done[i] && waiting[i] == 0) release_sources_of(static_cast<int32_t>(i));
      if (!early[i] && pending[i] == 0 && !done[i]) prioritize(static_cast<int32_t>(i));
    }
    while (order.size() < n) {
      while (!ready.empty()) {
        const auto [p, neg] = ready.top();
        ready.pop();
        const int32_t i = -neg;
        if (done[i] || p != priority[i]) continue;  // run, or a stale entry
        run(i);
      }
      // Sources whose every user also waits on a value that needs them
      // (none here in practice): released all at once.
      bool released_any = false;
      for (size_t i = 0; i < n; ++i) {
        if (source[i] && !released[i] && !done[i]) {
          released[i] = released_any = true;
          if (pending[i] == 0) prioritize(static_cast<int32_t>(i));
        }
      }
      if (!released_any) break;
    }
    WEFT_INTERNAL_CHECK(order.size() == n, "schedule of {} instructions placed {}", n,
                        order.size());
    return order;
  }
};

}  // namespace

std::vector<HloInstruction*> ScheduleComputation(const HloComputation& computation) {
  const Graph g(computation);
  std::vector<HloInstruction*> list = g.ListSchedule();
  std::vector<HloInstruction*> hoisted = g.Hoisted();
  if (g.Peak(hoisted) < g.Peak(list)) return hoisted;
  return list;
}

int64_t ScheduledPeakBytes(const HloComputation& computation,
                           const std::vector<HloInstruction*>& sequence) {
  return Graph(computation).Peak(sequence);
}

}  // namespace weft::compiler
