#include "weft/hlo/block_scaled_dot.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "weft/base/error.h"

namespace weft {

bool IsBlockScaledDot(const HloInstruction& instr) {
  return instr.opcode() == HloOpcode::kCustomCall &&
         instr.attrs().custom_call_target == kBlockScaledDotTarget;
}

bool HasBlockScaledDot(const HloModule& module) {
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      if (IsBlockScaledDot(*instr)) return true;
    }
  }
  return false;
}

DotDimensionNumbers BlockScaledDotNumbers(int64_t rank) {
  DotDimensionNumbers dn;
  dn.lhs_contracting_dims = {rank - 1};
  dn.rhs_contracting_dims = {rank - 1};
  if (rank == 3) {
    dn.lhs_batch_dims = {0};
    dn.rhs_batch_dims = {0};
  }
  return dn;
}

namespace {

// The block_size of a {"block_scaled_dot_backend_config":{block_size:32}}
// backend_config (XLA writes the key unquoted), or 0.
int64_t ConfiguredBlockSize(const std::string& config) {
  const size_t key = config.find("block_size");
  if (key == std::string::npos) return 0;
  size_t i = key + std::string("block_size").size();
  while (i < config.size() && (config[i] == '"' || config[i] == ':' || config[i] == ' ')) ++i;
  int64_t size = 0;
  while (i < config.size() && std::isdigit(static_cast<unsigned char>(config[i])) != 0 &&
         size < (int64_t{1} << 40)) {
    size = size * 10 + (config[i++] - '0');
  }
  return size;
}

}  // namespace

int64_t BlockScaledDotBlockSize(const HloInstruction& instr, int operand) {
  const int64_t configured = ConfiguredBlockSize(instr.attrs().backend_config);
  if (configured > 0) return configured;
  const Shape& x = instr.operand(operand)->shape();
  const Shape& scale = instr.operand(2 + operand)->shape();
  return x.dimensions().back() / scale.dimensions().back();
}

void CheckBlockScaledDot(const HloInstruction& instr) {
  const std::string what = instr.Describe();
  WEFT_CHECK(instr.operand_count() == 3 || instr.operand_count() == 4,
             "{}: a block-scaled dot takes lhs, rhs, lhs_scale and (optionally) rhs_scale, not "
             "{} operands",
             what, instr.operand_count());
  for (const HloInstruction* op : instr.operands()) {
    WEFT_CHECK(op->shape().IsArray() && IsFloatingPoint(op->shape().element_type()) &&
                   !IsComplex(op->shape().element_type()),
               "{}: operand '{}' must be a float array, not {}", what, op->name(),
               op->shape().ToString());
  }
  const Shape& lhs = instr.operand(0)->shape();
  const Shape& rhs = instr.operand(1)->shape();
  const int64_t rank = lhs.rank();
  WEFT_CHECK((rank == 2 || rank == 3) && rhs.rank() == rank,
             "{}: lhs and rhs must both be [M,K]/[N,K] or [B,M,K]/[B,N,K], not {} and {}", what,
             lhs.ToString(), rhs.ToString());
  const int64_t k = lhs.dimensions(rank - 1);
  WEFT_CHECK(rhs.dimensions(rank - 1) == k && (rank == 2 || rhs.dimensions(0) == lhs.dimensions(0)),
             "{}: lhs {} and rhs {} must agree on the contracting (minor) dim{}", what,
             lhs.ToString(), rhs.ToString(), rank == 3 ? " and the batch dim" : "");
  const int64_t configured = ConfiguredBlockSize(instr.attrs().backend_config);
  for (int s = 0; s < 2; ++s) {
    if (!HasBlockScale(instr, s)) continue;
    const Shape& x = instr.operand(s)->shape();
    const Shape& scale = instr.operand(2 + s)->shape();
    bool same_major = scale.rank() == rank;
    for (int64_t d = 0; same_major && d + 1 < rank; ++d) {
      same_major = scale.dimensions(d) == x.dimensions(d);
    }
    const int64_t ks = same_major ? scale.dimensions(rank - 1) : 0;
    const bool blocks =
        ks > 0 &&
        (configured > 0 ? configured * ks >= k && configured * (ks - 1) < k : k % ks == 0);
    WEFT_CHECK(same_major && blocks,
               "{}: scale '{}' {} must be shaped like '{}' {} with its minor dim {} / block "
               "size{}",
               what, instr.operand(2 + s)->name(), scale.ToString(), instr.operand(s)->name(),
               x.ToString(), k,
               configured > 0 ? fmt::format(" ({}, rounded up)", configured)
                              : std::string(" (dividing it)"));
  }
  const Shape& out = instr.shape();
  std::vector<int64_t> want;
  if (rank == 3) want.push_back(lhs.dimensions(0));
  want.push_back(lhs.dimensions(rank - 2));
  want.push_back(rhs.dimensions(rank - 2));
  WEFT_CHECK(
      out.IsArray() && IsFloatingPoint(out.element_type()) && !IsFloat8(out.element_type()) &&
          std::equal(want.begin(), want.end(), out.dimensions().begin(), out.dimensions().end()),
      "{}: the result must be a float (f32, bf16, f16, f64) array of dims [{}], not {}", what,
      fmt::join(want, ","), out.ToString());
}

}  // namespace weft
