#include "checkpoint_shards.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "weft/base/algorithm.h"
#include "weft/base/atomic_file.h"
#include "weft/base/crc32c.h"
#include "weft/base/error.h"

namespace weft {
namespace train {
namespace {

namespace fs = std::filesystem;

// A box's place in a row-major container of `dims` elements per dim.
struct Placement {
  std::span<const int64_t> dims;
  std::vector<int64_t> offset;
};

// Calls fn(a, b, n) for the box of `extent` placed in two containers, once per
// run of n elements that is contiguous in both: a and b are the run's first
// element in each container (row-major element offsets). Runs come in the
// box's row-major order.
template <typename Fn>
void ForEachRun(std::span<const int64_t> extent, const Placement& a, const Placement& b, Fn fn) {
  const size_t rank = extent.size();
  if (Product(extent) == 0) return;
  if (rank == 0) {
    fn(int64_t{0}, int64_t{0}, int64_t{1});
    return;
  }
  // Inner dims that both containers hold whole merge into one run.
  size_t inner = rank - 1;
  int64_t run = extent[inner];
  while (inner > 0 && extent[inner] == a.dims[inner] && extent[inner] == b.dims[inner]) {
    --inner;
    run *= extent[inner];
  }
  std::vector<int64_t> stride_a(rank, 1), stride_b(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) {
    stride_a[d - 1] = stride_a[d] * a.dims[d];
    stride_b[d - 1] = stride_b[d] * b.dims[d];
  }
  std::vector<int64_t> index(inner, 0);  // over the outer dims [0, inner)
  while (true) {
    int64_t at_a = 0, at_b = 0;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t i = d < inner ? index[d] : 0;
      at_a += (i + a.offset[d]) * stride_a[d];
      at_b += (i + b.offset[d]) * stride_b[d];
    }
    fn(at_a, at_b, run);
    size_t d = inner;
    while (d > 0 && ++index[d - 1] == extent[d - 1]) index[--d] = 0;
    if (d == 0) return;
  }
}

std::vector<int64_t> Zeros(size_t n) { return std::vector<int64_t>(n, 0); }

// Whether any of `n` values of `Bits` at `data` has all of `exponent`'s bits
// set (NaN or infinity); branch-free, so the compiler vectorizes it.
template <typename Bits>
bool AnyNonFinite(const std::byte* data, int64_t n, Bits exponent) {
  Bits bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    Bits bits;
    std::memcpy(&bits, data + i * static_cast<int64_t>(sizeof(Bits)), sizeof(Bits));
    bad |= static_cast<Bits>((bits & exponent) == exponent);
  }
  return bad != 0;
}

template <typename Bits>
std::optional<int64_t> FirstNonFiniteOf(const std::byte* data, int64_t n, Bits exponent) {
  constexpr int64_t kBlock = 4096;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t count = std::min(kBlock, n - begin);
    const std::byte* block = data + begin * static_cast<int64_t>(sizeof(Bits));
    if (!AnyNonFinite(block, count, exponent)) continue;
    for (int64_t i = 0; i < count; ++i) {
      if (AnyNonFinite(block + i * static_cast<int64_t>(sizeof(Bits)), 1, exponent)) {
        return begin + i;
      }
    }
  }
  return std::nullopt;
}

// The first non-finite element of `n` elements of `dtype` at `data`, if any.
std::optional<int64_t> FirstNonFinite(PrimitiveType dtype, const std::byte* data, int64_t n) {
  if (dtype == PrimitiveType::kF32) return FirstNonFiniteOf<uint32_t>(data, n, 0x7F800000u);
  if (dtype == PrimitiveType::kBF16) return FirstNonFiniteOf<uint16_t>(data, n, 0x7F80u);
  return std::nullopt;
}

// Element `local` (row-major in the box) as a row-major index of the tensor.
int64_t GlobalElement(int64_t local, const TensorBox& box, std::span<const int64_t> shape) {
  int64_t global = 0, stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t i = local % box.extent[d] + box.offset[d];
    local /= box.extent[d];
    global += i * stride;
    stride *= shape[d];
  }
  return global;
}

std::optional<TensorBox> Intersect(const TensorBox& a, const TensorBox& b) {
  TensorBox out;
  for (size_t d = 0; d < a.offset.size(); ++d) {
    const int64_t lo = std::max(a.offset[d], b.offset[d]);
    const int64_t hi = std::min(a.offset[d] + a.extent[d], b.offset[d] + b.extent[d]);
    if (hi <= lo) return std::nullopt;
    out.offset.push_back(lo);
    out.extent.push_back(hi - lo);
  }
  return out;
}

std::vector<int64_t> Minus(std::span<const int64_t> a, std::span<const int64_t> b) {
  std::vector<int64_t> out(a.size());
  for (size_t d = 0; d < a.size(); ++d) out[d] = a[d] - b[d];
  return out;
}

// Reads one slice's chunks on demand, each checked against its checksum and
// for non-finite values before any of it is used.
class ChunkReader {
 public:
  ChunkReader(const InputFile& file, const CheckpointSlice& slice, const std::string& name,
              const TensorSpec& spec, std::vector<std::byte>& buffer)
      : file_(file), slice_(slice), name_(name), spec_(spec), buffer_(buffer) {
    element_bytes_ = ByteWidth(spec.dtype);
    slice_bytes_ = slice.box.num_elements() * element_bytes_;
  }

  // Copies slice bytes [from, to) to `out`.
  void Copy(int64_t from, int64_t to, std::byte* out) {
    while (from < to) {
      const int64_t chunk = from / slice_.chunk_bytes;
      if (chunk != loaded_) Load(chunk);
      const int64_t begin = chunk * slice_.chunk_bytes;
      const int64_t take = std::min(to, begin + length_) - from;
      std::memcpy(out, buffer_.data() + (from - begin), static_cast<size_t>(take));
      out += take;
      from += take;
    }
  }

 private:
  void Load(int64_t chunk) {
    const int64_t begin = chunk * slice_.chunk_bytes;
    length_ = std::min(slice_.chunk_bytes, slice_bytes_ - begin);
    WEFT_INTERNAL_CHECK(static_cast<int64_t>(buffer_.size()) >= length_,
                        "tensor '{}': a chunk of {} bytes for a buffer of {}", name_, length_,
                        buffer_.size());
    file_.ReadAt(slice_.begin + static_cast<uint64_t>(begin), buffer_.data(),
                 static_cast<size_t>(length_));
    loaded_ = chunk;
    if (!slice_.crc32c.empty()) {
      const uint32_t actual = Crc32c(buffer_.data(), static_cast<size_t>(length_));
      const uint32_t recorded = slice_.crc32c.at(static_cast<size_t>(chunk));
      if (actual != recorded) {
        Fail(
            "{} is damaged: tensor '{}' has checksum {} in bytes {}..{} of its slice at [{}], "
            "state.json recorded {} (its bytes changed); resume from another checkpoint",
            file_.path().string(), name_, Crc32cText(actual), begin, begin + length_,
            fmt::join(slice_.box.offset, ","), Crc32cText(recorded));
      }
    }
    if (auto bad = FirstNonFinite(spec_.dtype, buffer_.data(), length_ / element_bytes_)) {
      const int64_t local = begin / element_bytes_ + *bad;
      Fail(
          "{}: tensor '{}' holds a non-finite value (element {}); a weft checkpoint never "
          "does, so this one was damaged or written by another tool; resume from another "
          "checkpoint",
          file_.path().string(), name_, GlobalElement(local, slice_.box, spec_.shape));
    }
  }

  const InputFile& file_;
  const CheckpointSlice& slice_;
  const std::string& name_;
  const TensorSpec& spec_;
  std::vector<std::byte>& buffer_;
  int64_t element_bytes_ = 0, slice_bytes_ = 0, length_ = 0, loaded_ = -1;
};

}  // namespace

std::vector<WrittenSlice> WriteShardFile(const fs::path& dir, const std::string& file,
                                         std::span<const SavePiece* const> pieces) {
  const fs::path path = dir / file;
  std::vector<const SavePiece*> ordered(pieces.begin(), pieces.end());
  std::sort(ordered.begin(), ordered.end(),
            [](const SavePiece* a, const SavePiece* b) { return a->name < b->name; });
  TensorSpecs specs;
  for (const SavePiece* p : ordered) {
    WEFT_INTERNAL_CHECK(specs.emplace(p->name, TensorSpec{p->global.dtype, p->box.extent}).second,
                        "{}: two pieces of tensor '{}' from one device", path.string(), p->name);
  }
  const std::string prefix = SafetensorsPrefix(specs, {{"format", "pt"}}, path.string());
  OutputFile out(path);
  out.Write(prefix);
  uint64_t position = prefix.size();
  int64_t longest = 0;  // one buffer, allocated once
  for (const SavePiece* p : ordered) {
    longest = std::max(longest, std::min(kChunkBytes, specs.at(p->name).num_bytes()));
  }
  std::vector<std::byte> buffer(static_cast<size_t>(longest));
  std::vector<WrittenSlice> written;
  for (const SavePiece* p : ordered) {
    const int64_t element = ByteWidth(p->global.dtype);
    WrittenSlice w{p->part, p->name, p->global, {file, p->box, position, kChunkBytes, {}}};
    int64_t filled = 0;
    auto flush = [&] {
      w.slice.crc32c.push_back(Crc32c(buffer.data(), static_cast<size_t>(filled)));
      out.Write(buffer.data(), static_cast<size_t>(filled));
      position += static_cast<uint64_t>(filled);
      filled = 0;
    };
    const std::vector<int64_t> zeros = Zeros(p->box.extent.size());
    ForEachRun(p->box.extent, {p->buffer_dims, zeros}, {p->box.extent, zeros},
               [&](int64_t at, int64_t, int64_t n) {
                 const std::byte* from = p->data + at * element;
                 int64_t left = n * element;
                 while (left > 0) {
                   const int64_t take = std::min(left, kChunkBytes - filled);
                   std::memcpy(buffer.data() + filled, from, static_cast<size_t>(take));
                   filled += take;
                   from += take;
                   left -= take;
                   if (filled == kChunkBytes) flush();
                 }
               });
    if (filled > 0) flush();
    written.push_back(std::move(w));
  }
  out.SyncAndClose();
  return written;
}

std::optional<std::string> FirstNonFinitePiece(std::span<const SavePiece> pieces) {
  for (const SavePiece& p : pieces) {
    const int64_t element = ByteWidth(p.global.dtype);
    std::optional<int64_t> found;
    int64_t done = 0;  // elements of the box before the current run
    const std::vector<int64_t> zeros = Zeros(p.box.extent.size());
    ForEachRun(p.box.extent, {p.buffer_dims, zeros}, {p.box.extent, zeros},
               [&](int64_t at, int64_t, int64_t n) {
                 if (found) return;
                 if (auto bad = FirstNonFinite(p.global.dtype, p.data + at * element, n)) {
                   found = done + *bad;
                 }
                 done += n;
               });
    if (found) {
      return fmt::format("tensor '{}' ({}) holds a non-finite value (element {})", p.name,
                         CheckpointPartName(p.part), GlobalElement(*found, p.box, p.global.shape));
    }
  }
  return std::nullopt;
}

void CheckTiling(const std::string& name, const CheckpointTensor& tensor,
                 const std::function<void(const std::string&)>& bad) {
  const auto& shape = tensor.spec.shape;
  int64_t covered = 0;
  for (size_t i = 0; i < tensor.slices.size(); ++i) {
    const TensorBox& box = tensor.slices[i].box;
    bool inside = box.offset.size() == shape.size() && box.extent.size() == shape.size();
    for (size_t d = 0; inside && d < shape.size(); ++d) {
      inside =
          box.offset[d] >= 0 && box.extent[d] >= 0 && box.offset[d] + box.extent[d] <= shape[d];
    }
    if (!inside) {
      bad(fmt::format(
          "tensor '{}': the slice at [{}] of extent [{}] does not lie inside its "
          "shape [{}]",
          name, fmt::join(box.offset, ","), fmt::join(box.extent, ","), fmt::join(shape, ",")));
    }
    for (size_t j = 0; j < i; ++j) {
      if (Intersect(box, tensor.slices[j].box) && box.num_elements() > 0) {
        bad(fmt::format("tensor '{}': the slices at [{}] and [{}] overlap", name,
                        fmt::join(box.offset, ","), fmt::join(tensor.slices[j].box.offset, ",")));
      }
    }
    covered += box.num_elements();
  }
  if (covered != Product(shape)) {
    bad(fmt::format("tensor '{}': its slices cover {} of its {} elements", name, covered,
                    Product(shape)));
  }
}

void CheckFilesAgainstIndex(const CheckpointIndex& index,
                            const std::map<std::string, uint64_t>& file_bytes,
                            const fs::path& state) {
  auto damaged = [&](const fs::path& path, const std::string& problem) {
    Fail("{} is damaged: {}; resume from another checkpoint", path.string(), problem);
  };
  // file -> (tensor name -> slice, spec)
  std::map<std::string, std::map<std::string, std::pair<const CheckpointSlice*, const TensorSpec*>>>
      by_file;
  for (CheckpointPart part : {CheckpointPart::kModel, CheckpointPart::kOptimizer}) {
    for (const auto& [name, tensor] : index.part(part)) {
      for (const CheckpointSlice& slice : tensor.slices) {
        if (!file_bytes.contains(slice.file)) {
          damaged(state, fmt::format("tensor '{}' has a slice in {}, a file it does not list", name,
                                     slice.file));
        }
        if (!by_file[slice.file].emplace(name, std::make_pair(&slice, &tensor.spec)).second) {
          damaged(state, fmt::format("tensor '{}' has two slices in {}", name, slice.file));
        }
      }
    }
  }
  for (const auto& [file, bytes] : file_bytes) {
    const fs::path path = index.dir / file;
    std::error_code error;
    const uint64_t actual = fs::file_size(path, error);
    if (error) damaged(state, fmt::format("it lists {}, which is missing", path.string()));
    if (actual != bytes) {
      damaged(path, fmt::format("it has {} bytes, state.json recorded {} (truncated or replaced)",
                                actual, bytes));
    }
    const SafetensorsHeader header = ReadSafetensorsHeader(path);
    const auto& recorded = by_file[file];
    for (const auto& [name, entry] : recorded) {
      const auto it = header.tensors.find(name);
      if (it == header.tensors.end()) {
        damaged(path, fmt::format("{} records tensor '{}' but the file holds no tensor of that "
                                  "name (renamed or replaced)",
                                  state.string(), name));
      }
      const SafetensorsEntry& e = it->second;
      const CheckpointSlice& slice = *entry.first;
      if (e.spec.dtype != entry.second->dtype || e.spec.shape != slice.box.extent ||
          e.begin != slice.begin) {
        damaged(path,
                fmt::format("tensor '{}' is {} [{}] at byte {}, {} records {} [{}] at byte "
                            "{}",
                            name, SafetensorsDTypeName(e.spec.dtype), fmt::join(e.spec.shape, ","),
                            e.begin, state.string(), SafetensorsDTypeName(entry.second->dtype),
                            fmt::join(slice.box.extent, ","), slice.begin));
      }
    }
    for (const auto& [name, entry] : header.tensors) {
      if (!recorded.contains(name)) {
        damaged(path, fmt::format("it holds tensor '{}' that {} does not record (renamed or "
                                  "replaced)",
                                  name, state.string()));
      }
    }
  }
}

}  // namespace train

void ReadTensorBox(const CheckpointIndex& index, CheckpointPart part, const std::string& name,
                   const TensorBox& box, std::span<std::byte> dest,
                   std::span<const int64_t> dest_dims) {
  using namespace train;
  const auto& tensors = index.part(part);
  const auto found = tensors.find(name);
  WEFT_CHECK(found != tensors.end(),
             "{} has no {} tensor '{}', which this model needs; resume with the config the "
             "checkpoint was written with",
             (index.dir / "state.json").string(), CheckpointPartName(part), name);
  const CheckpointTensor& tensor = found->second;
  const int64_t element = ByteWidth(tensor.spec.dtype);
  bool fits =
      box.extent.size() == tensor.spec.shape.size() && dest_dims.size() == box.extent.size();
  for (size_t d = 0; fits && d < box.extent.size(); ++d) {
    fits = box.offset[d] >= 0 && box.offset[d] + box.extent[d] <= tensor.spec.shape[d] &&
           box.extent[d] <= dest_dims[d];
  }
  WEFT_INTERNAL_CHECK(
      fits && static_cast<int64_t>(dest.size()) >= Product(dest_dims) * element,
      "tensor '{}': box [{}]+[{}] into a buffer of [{}] does not fit its shape [{}]", name,
      fmt::join(box.offset, ","), fmt::join(box.extent, ","), fmt::join(dest_dims, ","),
      fmt::join(tensor.spec.shape, ","));
  std::map<std::string, std::unique_ptr<InputFile>> files;
  int64_t longest = 0;
  for (const CheckpointSlice& slice : tensor.slices) {
    if (!Intersect(slice.box, box)) continue;
    longest = std::max(longest, std::min(slice.chunk_bytes, slice.box.num_elements() * element));
  }
  std::vector<std::byte> buffer(static_cast<size_t>(longest));  // the one I/O buffer
  for (const CheckpointSlice& slice : tensor.slices) {
    const auto part_of_box = Intersect(slice.box, box);
    if (!part_of_box) continue;
    auto& file = files[slice.file];
    if (!file) file = std::make_unique<InputFile>(index.dir / slice.file);
    ChunkReader reader(*file, slice, name, tensor.spec, buffer);
    ForEachRun(part_of_box->extent,
               {slice.box.extent, Minus(part_of_box->offset, slice.box.offset)},
               {dest_dims, Minus(part_of_box->offset, box.offset)},
               [&](int64_t at_slice, int64_t at_dest, int64_t n) {
                 reader.Copy(at_slice * element, (at_slice + n) * element,
                             dest.data() + at_dest * element);
               });
  }
}

}  // namespace weft
