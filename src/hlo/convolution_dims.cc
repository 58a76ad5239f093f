// convolution's dim_labels: XLA's text for ConvolutionDimensionNumbers,
// lhs_rhs->out (b01f_01io->b01f). Each part names every dim of its tensor
// once: b / f (batch, feature) for the input and the result, i / o (input,
// output feature) for the kernel, and digit k for spatial dim k.
#include <fmt/format.h>

#include <string>

#include "weft/hlo/instruction.h"

namespace weft {
namespace {

// One part of the labels: the two non-spatial letters' dims and the spatial
// dims in digit order. False (with `error`) when the part is malformed.
bool ParsePart(std::string_view part, char first, char second, std::string_view what,
               int64_t* first_dim, int64_t* second_dim, std::vector<int64_t>* spatial,
               std::string* error) {
  const int64_t rank = static_cast<int64_t>(part.size());
  if (rank < 2) {
    *error =
        fmt::format("the {} labels '{}' need at least '{}' and '{}'", what, part, first, second);
    return false;
  }
  *first_dim = *second_dim = -1;
  spatial->assign(rank - 2, -1);
  for (int64_t d = 0; d < rank; ++d) {
    const char c = part[d];
    int64_t* slot = nullptr;
    if (c == first) {
      slot = first_dim;
    } else if (c == second) {
      slot = second_dim;
    } else if (c >= '0' && c <= '9' && c - '0' < rank - 2) {
      slot = &(*spatial)[c - '0'];
    } else {
      *error = fmt::format(
          "the {} labels '{}' hold '{}'; a rank-{} part uses '{}', '{}' and the digits 0 to {} "
          "once each",
          what, part, c, rank, first, second, rank - 3);
      return false;
    }
    if (*slot != -1) {
      *error = fmt::format("the {} labels '{}' name '{}' twice", what, part, c);
      return false;
    }
    *slot = d;
  }
  if (*first_dim == -1 || *second_dim == -1) {
    *error = fmt::format("the {} labels '{}' lack '{}' or '{}'", what, part, first, second);
    return false;
  }
  return true;
}

std::string PartString(int64_t rank, char first, int64_t first_dim, char second, int64_t second_dim,
                       const std::vector<int64_t>& spatial) {
  std::string s(rank, '?');
  if (first_dim >= 0 && first_dim < rank) s[first_dim] = first;
  if (second_dim >= 0 && second_dim < rank) s[second_dim] = second;
  for (size_t k = 0; k < spatial.size(); ++k) {
    if (spatial[k] >= 0 && spatial[k] < rank) s[spatial[k]] = static_cast<char>('0' + k);
  }
  return s;
}

}  // namespace

std::string ConvolutionDimLabelsString(const ConvolutionDimensionNumbers& dn) {
  const int64_t rank = dn.num_spatial_dims() + 2;
  return fmt::format("{}_{}->{}",
                     PartString(rank, 'b', dn.input_batch_dimension, 'f',
                                dn.input_feature_dimension, dn.input_spatial_dimensions),
                     PartString(rank, 'i', dn.kernel_input_feature_dimension, 'o',
                                dn.kernel_output_feature_dimension, dn.kernel_spatial_dimensions),
                     PartString(rank, 'b', dn.output_batch_dimension, 'f',
                                dn.output_feature_dimension, dn.output_spatial_dimensions));
}

std::optional<ConvolutionDimensionNumbers> ParseConvolutionDimLabels(std::string_view text,
                                                                     std::string* error) {
  const size_t arrow = text.find("->");
  const size_t underscore = text.find('_');
  if (arrow == std::string_view::npos || underscore == std::string_view::npos ||
      underscore > arrow) {
    *error =
        fmt::format("dim_labels '{}' is not of the form lhs_rhs->out (e.g. b01f_01io->b01f)", text);
    return std::nullopt;
  }
  const std::string_view lhs = text.substr(0, underscore);
  const std::string_view rhs = text.substr(underscore + 1, arrow - underscore - 1);
  const std::string_view out = text.substr(arrow + 2);
  if (lhs.size() != rhs.size() || lhs.size() != out.size()) {
    *error = fmt::format(
        "dim_labels '{}': the input, kernel and output parts must have one rank, got {}, {} "
        "and {}",
        text, lhs.size(), rhs.size(), out.size());
    return std::nullopt;
  }
  if (lhs.size() > 12) {
    *error = fmt::format("dim_labels '{}': at most 10 spatial dims (digits 0-9)", text);
    return std::nullopt;
  }
  ConvolutionDimensionNumbers dn;
  if (!ParsePart(lhs, 'b', 'f', "input", &dn.input_batch_dimension, &dn.input_feature_dimension,
                 &dn.input_spatial_dimensions, error) ||
      !ParsePart(rhs, 'i', 'o', "kernel", &dn.kernel_input_feature_dimension,
                 &dn.kernel_output_feature_dimension, &dn.kernel_spatial_dimensions, error) ||
      !ParsePart(out, 'b', 'f', "output", &dn.output_batch_dimension, &dn.output_feature_dimension,
                 &dn.output_spatial_dimensions, error)) {
    return std::nullopt;
  }
  return dn;
}

}  // namespace weft
