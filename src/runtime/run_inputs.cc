// `weft run`'s data (run_command.h): seeded inputs drawn over the ranges
// their uses admit, split into each device's piece by a sharding, and the
// pieces joined (or all-gathered) back into whole values.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <unordered_set>

#include "executor_eval.h"
#include "weft/base/error.h"
#include "weft/base/thread_pool.h"
#include "weft/runtime/run_command.h"

namespace weft::runtime {

using compiler::CompiledProgram;

namespace {

// ---------------------------------------------------------------------------
// Copying a box of elements between row-major arrays.

struct Box {
  std::vector<int64_t> start, extent;
};

void CopyBox(const std::byte* src, const std::vector<int64_t>& src_dims,
             const std::vector<int64_t>& src_start, std::byte* dst,
             const std::vector<int64_t>& dst_dims, const std::vector<int64_t>& dst_start,
             const std::vector<int64_t>& extent, int64_t elem) {
  const size_t rank = extent.size();
  for (int64_t e : extent) {
    if (e == 0) return;
  }
  if (rank == 0) {
    std::memcpy(dst, src, elem);
    return;
  }
  std::vector<int64_t> src_stride(rank, 1), dst_stride(rank, 1);
  for (size_t i = rank - 1; i > 0; --i) {
    src_stride[i - 1] = src_stride[i] * src_dims[i];
    dst_stride[i - 1] = dst_stride[i] * dst_dims[i];
  }
  const int64_t run = extent[rank - 1] * elem;
  std::vector<int64_t> idx(rank, 0);  // odometer over all dims but the last
  while (true) {
    int64_t s = 0, d = 0;
    for (size_t i = 0; i < rank; ++i) {
      s += (src_start[i] + idx[i]) * src_stride[i];
      d += (dst_start[i] + idx[i]) * dst_stride[i];
    }
    std::memcpy(dst + d * elem, src + s * elem, run);
    int64_t i = static_cast<int64_t>(rank) - 2;
    while (i >= 0 && ++idx[i] == extent[i]) idx[i--] = 0;
    if (i < 0) return;
  }
}

}  // namespace

HostTensor GatherTensor(const HostTensor& piece, const HloSharding& sharding,
                        const Shape& global_shape, Communicator& comm) {
  const int64_t n = comm.num_devices();
  const int64_t bytes = piece.byte_size();
  std::vector<std::byte> all(static_cast<size_t>(bytes * n));
  comm.AllGather(piece.raw_data(), all.data(), bytes, PrimitiveType::kPred);
  std::vector<HostTensor> pieces;
  for (int64_t d = 0; d < n; ++d) {
    HostTensor t = HostTensor::Uninitialized(piece.shape());
    std::memcpy(t.mutable_raw_data(), all.data() + d * bytes, static_cast<size_t>(bytes));
    pieces.push_back(std::move(t));
  }
  return JoinTensor(pieces, sharding, global_shape);
}

namespace {

// The largest start index `user` admits through operand `k` (-1: not an
// index there): the indexed extent less the slice, over the dims it indexes.
int64_t IndexExtent(const HloInstruction& user, int64_t k) {
  const HloAttributes& a = user.attrs();
  switch (user.opcode()) {
    case HloOpcode::kDynamicSlice:
      if (k == 0) return -1;
      return user.operand(0)->shape().dimensions(k - 1) - a.dynamic_slice_sizes.at(k - 1);
    case HloOpcode::kDynamicUpdateSlice:
      if (k < 2) return -1;
      return user.operand(0)->shape().dimensions(k - 2) -
             user.operand(1)->shape().dimensions(k - 2);
    case HloOpcode::kGather: {
      if (k != 1) return -1;
      int64_t most = 0;
      for (size_t i = 0; i < a.gather.start_index_map.size(); ++i) {
        const int64_t d = a.gather.start_index_map[i];
        most = std::max(most, user.operand(0)->shape().dimensions(d) - a.gather_slice_sizes.at(d));
      }
      return most;
    }
    case HloOpcode::kScatter: {
      const int64_t operands = (user.operand_count() - 1) / 2;
      if (k != operands) return -1;
      int64_t most = 0;
      for (int64_t d : a.scatter.scatter_dims_to_operand_dims) {
        most = std::max(most, user.operand(0)->shape().dimensions(d));
      }
      return most;
    }
    case HloOpcode::kConditional:  // a branch index: N branches
      return k == 0 ? static_cast<int64_t>(user.called_computations().size()) - 1 : -1;
    default:
      return -1;
  }
}

// Whether `op` passes its (first) operand's values through unchanged.
bool KeepsValues(HloOpcode op) {
  return op == HloOpcode::kConvert || op == HloOpcode::kReshape || op == HloOpcode::kBroadcast ||
         op == HloOpcode::kSlice || op == HloOpcode::kConcatenate || op == HloOpcode::kCopy ||
         op == HloOpcode::kTranspose;
}

}  // namespace

std::vector<IntegerRange> InputIntegerRanges(const HloModule& module) {
  std::vector<IntegerRange> out;
  const HloComputation* entry = module.entry_computation();
  if (entry == nullptr) return out;
  for (const HloInstruction* p : entry->parameter_instructions()) {
    const size_t leaves = p->shape().Leaves().size();
    IntegerRange r;
    if (p->shape().IsArray() && !IsFloatingPoint(p->shape().element_type()) &&
        p->shape().element_type() != PrimitiveType::kPred) {
      int64_t most = -1;
      std::vector<const HloInstruction*> stack = {p};
      std::unordered_set<const HloInstruction*> seen;
      while (!stack.empty()) {
        const HloInstruction* v = stack.back();
        stack.pop_back();
        if (!seen.insert(v).second) continue;
        for (const HloInstruction* u : v->users()) {
          for (int64_t k = 0; k < u->operand_count(); ++k) {
            if (u->operand(k) == v) most = std::max(most, IndexExtent(*u, k));
          }
          if (KeepsValues(u->opcode())) stack.push_back(u);
        }
      }
      if (most >= 0) r = IntegerRange{-2, most + 2};
    }
    for (size_t i = 0; i < leaves; ++i) out.push_back(r);
  }
  return out;
}

std::vector<HostTensor> RandomInputs(std::span<const Shape> shapes, uint64_t seed,
                                     std::span<const IntegerRange> ranges) {
  // One stream per block of kRandomBlock elements of a leaf, seeded by the
  // seed, the leaf and the block: a leaf's values depend on neither the
  // other leaves nor the threads, and the blocks fill in parallel (one
  // stream per leaf took 11 s of a 2.4 GB input, half of a `weft run
  // --check` of XLA's GatherPassthrough module).
  std::vector<HostTensor> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& shape = shapes[i];
    WEFT_CHECK(shape.IsArray(), "internal: input {} is not an array", i);
    // Written in place (as FromDoubles stores each value): no staging copy
    // of 8 bytes per element beside the tensor.
    HostTensor t = HostTensor::Uninitialized(shape);
    const PrimitiveType type = shape.element_type();
    void* data = t.mutable_raw_data();
    const int64_t n = type == PrimitiveType::kToken ? 0 : shape.ElementsCount();
    IntegerRange r = i < ranges.size() ? ranges[i] : IntegerRange{};
    if (!IsSignedInteger(type)) r.lo = std::max<int64_t>(r.lo, 0);  // unsigned: no negatives
    const int64_t blocks = (n + kRandomBlock - 1) / kRandomBlock;
    ThreadPool::Global().ParallelFor(blocks, [&](int64_t block, int) {
      std::seed_seq seq{static_cast<uint32_t>(seed),        static_cast<uint32_t>(seed >> 32),
                        static_cast<uint32_t>(i),           static_cast<uint32_t>(block),
                        static_cast<uint32_t>(block >> 32), 0x77656674u};
      std::mt19937_64 rng(seq);
      const int64_t begin = block * kRandomBlock, end = std::min(n, begin + kRandomBlock);
      if (type == PrimitiveType::kF8E8M0FNU) {  // MX block scales: powers of two, 2^-3..2^3
        std::uniform_int_distribution<int> exponent(-3, 3);
        for (int64_t k = begin; k < end; ++k) {
          exec::StoreDouble(type, data, k, std::ldexp(1.0, exponent(rng)));
        }
      } else if (IsFloatingPoint(type)) {
        std::normal_distribution<double> normal(0.0, 1.0);
        for (int64_t k = begin; k < end; ++k) exec::StoreDouble(type, data, k, normal(rng));
      } else if (type == PrimitiveType::kPred) {
        std::bernoulli_distribution coin(0.5);
        for (int64_t k = begin; k < end; ++k) exec::StoreDouble(type, data, k, coin(rng) ? 1 : 0);
      } else {
        std::uniform_int_distribution<int64_t> uniform(r.lo, r.hi);
        for (int64_t k = begin; k < end; ++k) {
          exec::StoreDouble(type, data, k, static_cast<double>(uniform(rng)));
        }
      }
    });
    out.push_back(std::move(t));
  }
  return out;
}

namespace {

// The sharding of a stacked manual value (ManualValueCount): the stack dim
// split like the manual devices or groups, the data dims as within a group.
HloSharding StackedSharding(const HloSharding& s, int64_t num_devices, int64_t rank) {
  if (s.IsManual()) {
    std::vector<int64_t> dims(static_cast<size_t>(rank), 1);
    dims[0] = num_devices;
    return HloSharding::Tile(TileAssignment::Iota(std::move(dims)));
  }
  const int64_t manual = s.SubgroupManualDim();
  const TileAssignment& ta = s.tile_assignment();
  std::vector<int64_t> perm = {manual};
  std::vector<SubgroupType> rest;
  for (int64_t d = 0; d < ta.num_dims(); ++d) {
    if (d == manual) continue;
    perm.push_back(d);
    if (d >= s.TiledDataRank()) rest.push_back(SubgroupType::kReplicated);
  }
  return HloSharding::Subgroup(ta.Transpose(perm), std::move(rest));
}

Shape WithLeadingOne(const Shape& shape) {
  std::vector<int64_t> dims = {1};
  for (int64_t d : shape.dimensions()) dims.push_back(d);
  return Shape(shape.element_type(), std::move(dims));
}

}  // namespace

namespace {

// Device `device`'s place among the devices holding addends of one value
// under a sharding with unreduced axes: (its index, the group's size).
std::pair<int64_t, int64_t> AddendPosition(const HloSharding& sharding, int64_t device,
                                           int64_t num_devices) {
  if (sharding.IsUnreduced()) {
    WEFT_CHECK(num_devices > 0, "internal: {{unreduced}} split without the device count");
    return {device, num_devices};
  }
  const int64_t dim = sharding.SubgroupUnreducedDim();
  const TileAssignment& ta = sharding.tile_assignment();
  const std::optional<std::vector<int64_t>> index = ta.IndexOf(device);
  WEFT_CHECK(index.has_value(), "device {} is not in sharding {}", device, sharding.ToString());
  return {(*index)[dim], ta.dim(dim)};
}

}  // namespace

HostTensor ShardTensor(const HostTensor& global, const HloSharding& sharding, int64_t device,
                       const Shape& local_shape, double pad, int64_t num_devices) {
  if (sharding.HasUnreduced()) {
    // Addends that are all needed: a float value split in g equal parts,
    // an integer one in g quotients, the first device adding the remainder.
    // (A copy: ShardTensor may return `global` itself, whose bytes are shared.)
    HostTensor piece =
        ShardTensor(global, sharding.WithoutUnreduced(), device, local_shape, pad).Clone();
    const auto [k, g] = AddendPosition(sharding, device, num_devices);
    const PrimitiveType type = local_shape.element_type();
    WEFT_CHECK(type != PrimitiveType::kPred,
               "a pred input of sharding {} has no addends; unreduced values are numbers",
               sharding.ToString());
    void* data = piece.mutable_raw_data();
    for (int64_t i = 0; i < local_shape.ElementsCount(); ++i) {
      const double x = exec::LoadAsDouble(type, data, i);
      double part = x / static_cast<double>(g);
      if (!IsFloatingPoint(type)) {
        part = std::trunc(part);
        if (k == 0) part = x - part * static_cast<double>(g - 1);
      }
      exec::StoreDouble(type, data, i, part);
    }
    return piece;
  }
  if (sharding.IsManualOrPartlyManual()) {
    const HloSharding stacked = StackedSharding(
        sharding, sharding.IsManual() ? global.dimensions().at(0) : 0, global.rank());
    return ShardTensor(global, stacked, device, WithLeadingOne(local_shape), pad)
        .Reshaped(local_shape);
  }
  if (!sharding.IsTiled()) {
    WEFT_CHECK(local_shape == global.shape(),
               "internal: an unsplit input of shape {} has local shape {}",
               global.shape().ToString(), local_shape.ToString());
    return global;
  }
  const std::vector<int64_t>& dims = global.dimensions();
  const std::vector<int64_t> tile = sharding.TileShape(dims);
  WEFT_CHECK(
      local_shape.dimensions() == tile && local_shape.element_type() == global.element_type(),
      "internal: input {} under {} should be {} per device, the program takes {}",
      global.shape().ToString(), sharding.ToString(), fmt::join(tile, ","), local_shape.ToString());
  const std::vector<int64_t> offset = sharding.TileOffsetForDevice(dims, device);
  const std::vector<int64_t> extent = sharding.TileShapeForDevice(dims, device);
  HostTensor local = HostTensor::Uninitialized(local_shape);
  if (extent != tile) {
    const double fill = IsFloatingPoint(global.element_type()) ? pad : 0;
    for (int64_t k = 0; k < local_shape.ElementsCount(); ++k) {
      exec::StoreDouble(local_shape.element_type(), local.mutable_raw_data(), k, fill);
    }
  }
  CopyBox(static_cast<const std::byte*>(global.raw_data()), dims, offset,
          static_cast<std::byte*>(local.mutable_raw_data()), tile,
          std::vector<int64_t>(tile.size(), 0), extent, ByteWidth(global.element_type()));
  return local;
}

std::vector<std::vector<HostTensor>> ShardInputs(const CompiledProgram& program,
                                                 std::span<const HostTensor> inputs, double pad) {
  WEFT_CHECK(inputs.size() == program.input_shapes.size(), "the program takes {} inputs, got {}",
             program.input_shapes.size(), inputs.size());
  std::vector<std::vector<HostTensor>> out(program.num_devices);
  for (int64_t d = 0; d < program.num_devices; ++d) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      WEFT_CHECK(inputs[i].shape() == program.input_shapes[i], "input {} ('{}') must be {}, got {}",
                 i, program.input_names[i], program.input_shapes[i].ToString(),
                 inputs[i].shape().ToString());
      out[d].push_back(ShardTensor(inputs[i], program.input_shardings[i], d,
                                   program.local_input_shapes[i], pad, program.num_devices));
    }
  }
  return out;
}

HostTensor JoinTensor(std::span<const HostTensor> pieces, const HloSharding& sharding,
                      const Shape& global_shape) {
  const int64_t n = static_cast<int64_t>(pieces.size());
  if (sharding.HasUnreduced()) {
    // The sum over each group of addends: one device per (tile, addend
    // index) adds its valid extent in.
    const HloSharding summed = sharding.WithoutUnreduced();
    const PrimitiveType type = global_shape.element_type();
    const std::vector<int64_t>& dims = global_shape.dimensions();
    const int64_t rank = global_shape.rank();
    HostTensor global(global_shape);
    for (int64_t i = 0; i < global_shape.ElementsCount(); ++i) {
      exec::StoreDouble(type, global.mutable_raw_data(), i, 0);
    }
    std::set<std::vector<int64_t>> joined;
    for (int64_t d = 0; d < n; ++d) {
      std::vector<int64_t> key =
          summed.IsTiled() ? summed.TileIndexForDevice(d) : std::vector<int64_t>{};
      key.push_back(AddendPosition(sharding, d, n).first);
      if (!joined.insert(key).second) continue;
      const std::vector<int64_t> offset = summed.TileOffsetForDevice(dims, d);
      const std::vector<int64_t> extent = summed.TileShapeForDevice(dims, d);
      const std::vector<int64_t>& tile = pieces[d].dimensions();
      if (std::find(extent.begin(), extent.end(), 0) != extent.end()) continue;
      std::vector<int64_t> at(static_cast<size_t>(rank), 0);  // within the extent
      while (true) {
        int64_t src = 0, dst = 0;
        for (int64_t k = 0; k < rank; ++k) {
          src = src * tile[k] + at[k];
          dst = dst * dims[k] + offset[k] + at[k];
        }
        const double sum = exec::LoadAsDouble(type, global.raw_data(), dst) +
                           exec::LoadAsDouble(type, pieces[d].raw_data(), src);
        exec::StoreDouble(type, global.mutable_raw_data(), dst, sum);
        int64_t k = rank - 1;
        while (k >= 0 && ++at[k] == extent[k]) at[k--] = 0;
        if (k < 0) break;
      }
    }
    return global;
  }
  if (sharding.IsManualOrPartlyManual()) {
    std::vector<HostTensor> stacked_pieces;
    for (const HostTensor& piece : pieces) {
      stacked_pieces.push_back(piece.Reshaped(WithLeadingOne(piece.shape())));
    }
    return JoinTensor(stacked_pieces, StackedSharding(sharding, n, global_shape.rank()),
                      global_shape);
  }
  if (!sharding.IsTiled()) {
    const int64_t source = sharding.IsMaximal() ? sharding.device() : 0;
    WEFT_CHECK(source < n && pieces[source].shape() == global_shape,
               "internal: output {} under {} has no whole copy on device {}",
               global_shape.ToString(), sharding.ToString(), source);
    return pieces[source];
  }
  const std::vector<int64_t>& dims = global_shape.dimensions();
  const std::vector<int64_t> tile = sharding.TileShape(dims);
  HostTensor global(global_shape);
  std::set<std::vector<int64_t>> joined;
  for (int64_t d = 0; d < n; ++d) {
    if (!sharding.UsesDevice(d) || !joined.insert(sharding.TileIndexForDevice(d)).second) continue;
    WEFT_CHECK(pieces[d].dimensions() == tile,
               "internal: device {}'s output piece is {}, the tile of {} under {} is [{}]", d,
               pieces[d].shape().ToString(), global_shape.ToString(), sharding.ToString(),
               fmt::join(tile, ","));
    CopyBox(static_cast<const std::byte*>(pieces[d].raw_data()), tile,
            std::vector<int64_t>(tile.size(), 0),
            static_cast<std::byte*>(global.mutable_raw_data()), dims,
            sharding.TileOffsetForDevice(dims, d), sharding.TileShapeForDevice(dims, d),
            ByteWidth(global_shape.element_type()));
  }
  return global;
}

}  // namespace weft::runtime
