#include "weft/analysis/chips.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "weft/base/data_files.h"
#include "weft/base/error.h"

namespace weft::analysis {
namespace {

std::string Where(std::string_view file, const toml::source_region& region) {
  if (region.begin.line == 0) return std::string(file);
  return fmt::format("{}:{}:{}", file, region.begin.line, region.begin.column);
}

const std::set<std::string>& KnownKeys() {
  static const std::set<std::string> keys = {
      "description",     "hbm_gb",           "hbm_gib",           "peak_tflops_bf16",
      "peak_tflops_f32", "ici_gbytes_per_s", "dcn_gbytes_per_s",  "host_gbytes_per_s",
      "max_slice_chips", "source",           "hbm_gbytes_per_s",  "ici_topology",
      "ici_links",       "matrix_tile",      "matrix_efficiency", "vector_tflops",
      "ici_latency_us",  "dcn_latency_us",   "cache_mb",          "cache_gbytes_per_s"};
  return keys;
}

double Number(const toml::table& t, std::string_view key, std::string_view file,
              std::string_view chip, bool required) {
  const toml::node* node = t.get(key);
  if (node == nullptr) {
    if (!required) return -1;
    Fail("{}: chip '{}' is missing the required key '{}'", Where(file, t.source()), chip, key);
  }
  double v = 0;
  if (auto i = node->value<int64_t>(); node->is_integer() && i) {
    v = static_cast<double>(*i);
  } else if (auto d = node->value<double>(); node->is_floating_point() && d) {
    v = *d;
  } else {
    Fail("{}: '{}' of chip '{}' must be a number", Where(file, node->source()), key, chip);
  }
  WEFT_CHECK(v > 0, "{}: '{}' of chip '{}' must be positive, got {}", Where(file, node->source()),
             key, chip, v);
  return v;
}

std::string String(const toml::table& t, std::string_view key, std::string_view file,
                   std::string_view chip, bool required) {
  const toml::node* node = t.get(key);
  if (node == nullptr) {
    WEFT_CHECK(!required, "{}: chip '{}' is missing the required key '{}'", Where(file, t.source()),
               chip, key);
    return "";
  }
  const auto s = node->value<std::string>();
  WEFT_CHECK(node->is_string() && s, "{}: '{}' of chip '{}' must be a string",
             Where(file, node->source()), key, chip);
  return *s;
}

}  // namespace

const Chip& ChipTable::Find(std::string_view name) const {
  for (const Chip& c : chips) {
    if (c.name == name) return c;
  }
  std::string known;
  for (const Chip& c : chips) known += (known.empty() ? "" : ", ") + c.name;
  Fail(
      "unknown chip '{}': {} defines {}; give --chip with one of them or add a [chips.{}] "
      "table to that file",
      name, file, known.empty() ? std::string("no chips") : known, name);
}

ChipTable ParseChipTable(std::string_view toml_text, std::string_view source_name) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    Fail("{}: {}", Where(source_name, e.source()), e.description());
  }
  ChipTable table;
  table.file = std::string(source_name);
  for (const auto& [key, node] : root) {
    WEFT_CHECK(key.str() == "chips", "{}: unknown top-level key '{}'; chips go in [chips.NAME]",
               Where(source_name, key.source()), key.str());
  }
  const toml::table* chips = root["chips"].as_table();
  WEFT_CHECK(chips != nullptr && !chips->empty(), "{}: no [chips.NAME] tables", source_name);
  std::vector<std::pair<const toml::key*, const toml::node*>> entries;
  for (const auto& [key, node] : *chips) entries.emplace_back(&key, &node);
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    const auto& x = a.first->source().begin;
    const auto& y = b.first->source().begin;
    return x.line != y.line ? x.line < y.line : x.column < y.column;
  });
  for (const auto& [key, node] : entries) {
    const std::string name(key->str());
    const toml::table* t = node->as_table();
    WEFT_CHECK(t != nullptr, "{}: chips.{} must be a table", Where(source_name, key->source()),
               name);
    for (const auto& [k, v] : *t) {
      WEFT_CHECK(KnownKeys().count(std::string(k.str())) > 0,
                 "{}: unknown key '{}' in chip '{}' (known: description, hbm_gb or hbm_gib, "
                 "peak_tflops_bf16, peak_tflops_f32, ici_gbytes_per_s, dcn_gbytes_per_s, "
                 "host_gbytes_per_s, max_slice_chips, source, "
                 "hbm_gbytes_per_s, ici_topology, ici_links, matrix_tile, matrix_efficiency, "
                 "vector_tflops, ici_latency_us, dcn_latency_us, cache_mb, cache_gbytes_per_s)",
                 Where(source_name, k.source()), k.str(), name);
    }
    Chip c;
    c.name = name;
    c.description = String(*t, "description", source_name, name, false);
    const double gb = Number(*t, "hbm_gb", source_name, name, false);
    const double gib = Number(*t, "hbm_gib", source_name, name, false);
    WEFT_CHECK((gb > 0) != (gib > 0), "{}: chip '{}' needs exactly one of hbm_gb and hbm_gib",
               Where(source_name, t->source()), name);
    c.hbm_bytes = gb > 0 ? gb * 1e9 : gib * 1073741824.0;
    c.peak_flops_bf16 = Number(*t, "peak_tflops_bf16", source_name, name, true) * 1e12;
    c.peak_flops_f32 = Number(*t, "peak_tflops_f32", source_name, name, true) * 1e12;
    c.ici_bytes_per_s = Number(*t, "ici_gbytes_per_s", source_name, name, true) * 1e9;
    c.dcn_bytes_per_s = Number(*t, "dcn_gbytes_per_s", source_name, name, true) * 1e9;
    c.host_bytes_per_s = Number(*t, "host_gbytes_per_s", source_name, name, true) * 1e9;
    c.max_slice_chips =
        static_cast<int64_t>(Number(*t, "max_slice_chips", source_name, name, true));
    c.source = String(*t, "source", source_name, name, true);
    c.hbm_bytes_per_s = Number(*t, "hbm_gbytes_per_s", source_name, name, true) * 1e9;
    const std::string topology = String(*t, "ici_topology", source_name, name, true);
    if (topology == "switch") {
      c.ici_topology = Chip::Topology::kSwitch;
    } else if (topology == "torus2d") {
      c.ici_topology = Chip::Topology::kTorus2d;
    } else if (topology == "torus3d") {
      c.ici_topology = Chip::Topology::kTorus3d;
    } else {
      Fail(
          "{}: ici_topology of chip '{}' must be \"switch\", \"torus2d\" or \"torus3d\", got "
          "\"{}\"",
          Where(source_name, t->source()), name, topology);
    }
    const double links =
        Number(*t, "ici_links", source_name, name, c.ici_topology != Chip::Topology::kSwitch);
    if (links > 0) {
      WEFT_CHECK(links == static_cast<double>(static_cast<int64_t>(links)),
                 "{}: ici_links of chip '{}' must be a whole number, got {}",
                 Where(source_name, t->source()), name, links);
      c.ici_links = static_cast<int64_t>(links);
    }
    if (const toml::node* tile = t->get("matrix_tile")) {
      const toml::array* a = tile->as_array();
      bool ok = a != nullptr && a->size() == 3;
      for (size_t i = 0; ok && i < 3; ++i) {
        const auto v = (*a)[i].value<int64_t>();
        ok = (*a)[i].is_integer() && v && *v >= 1;
        if (ok) c.matrix_tile[i] = *v;
      }
      WEFT_CHECK(ok, "{}: matrix_tile of chip '{}' must be three positive integers [M, N, K]",
                 Where(source_name, tile->source()), name);
    }
    const double efficiency = Number(*t, "matrix_efficiency", source_name, name, false);
    if (efficiency > 0) {
      WEFT_CHECK(efficiency <= 1, "{}: matrix_efficiency of chip '{}' must be in (0, 1], got {}",
                 Where(source_name, t->source()), name, efficiency);
      c.matrix_efficiency = efficiency;
    }
    const double vector = Number(*t, "vector_tflops", source_name, name, false);
    if (vector > 0) c.vector_flops = vector * 1e12;
    const double ici_latency = Number(*t, "ici_latency_us", source_name, name, false);
    if (ici_latency > 0) c.ici_latency_s = ici_latency * 1e-6;
    const double dcn_latency = Number(*t, "dcn_latency_us", source_name, name, false);
    if (dcn_latency > 0) c.dcn_latency_s = dcn_latency * 1e-6;
    const double cache_mb = Number(*t, "cache_mb", source_name, name, false);
    const double cache_rate = Number(*t, "cache_gbytes_per_s", source_name, name, false);
    WEFT_CHECK((cache_mb > 0) == (cache_rate > 0),
               "{}: chip '{}' needs both cache_mb and cache_gbytes_per_s, or neither",
               Where(source_name, t->source()), name);
    if (cache_mb > 0) {
      c.cache_bytes = cache_mb * 1e6;
      c.cache_bytes_per_s = cache_rate * 1e9;
    }
    table.chips.push_back(std::move(c));
  }
  return table;
}

ChipTable LoadChipTable(const std::filesystem::path& path) {
  std::error_code ec;
  WEFT_CHECK(!std::filesystem::is_directory(path, ec),
             "the chips file {} is a directory; give --chips-file FILE (configs/chips.toml in the "
             "source tree)",
             path.string());
  WEFT_CHECK(std::filesystem::exists(path, ec),
             "cannot read the chips file {}; give --chips-file FILE (configs/chips.toml "
             "in the source tree)",
             path.string());
  // A device (/dev/zero) or a file over 16 MiB is refused unread.
  return ParseChipTable(ReadInputFile(path, "chips file", int64_t{16} << 20), path.string());
}

std::filesystem::path FindChipTable(const std::filesystem::path& config_file) {
  namespace fs = std::filesystem;
  const fs::path beside = config_file.parent_path() / "chips.toml";
  // The non-throwing forms: an unreadable directory is "not there", not a
  // filesystem_error; LoadChipTable then names the file it could not read.
  std::error_code ec;
  if (!config_file.empty() && fs::exists(beside, ec)) return beside;
  return FindDataFile("configs/chips.toml");
}

}  // namespace weft::analysis
