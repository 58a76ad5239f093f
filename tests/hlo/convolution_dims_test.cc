#include <gtest/gtest.h>

#include <string>

#include "error_of.h"
#include "weft/hlo/instruction.h"

namespace weft {
namespace {

using weft::testing::Mentions;

TEST(ConvolutionDimLabelsTest, ParsesEveryPartAndPrintsItBack) {
  std::string error;
  const auto dn = ParseConvolutionDimLabels("b01f_01io->b01f", &error);
  ASSERT_TRUE(dn) << error;
  EXPECT_EQ(dn->input_batch_dimension, 0);
  EXPECT_EQ(dn->input_feature_dimension, 3);
  EXPECT_EQ(dn->input_spatial_dimensions, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(dn->kernel_input_feature_dimension, 2);
  EXPECT_EQ(dn->kernel_output_feature_dimension, 3);
  EXPECT_EQ(dn->kernel_spatial_dimensions, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(dn->output_batch_dimension, 0);
  EXPECT_EQ(dn->output_feature_dimension, 3);
  EXPECT_EQ(dn->output_spatial_dimensions, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ConvolutionDimLabelsString(*dn), "b01f_01io->b01f");

  // Spatial digits in any order, features anywhere; 1-D, 3-D and no spatial dims.
  for (const char* text : {"bf01_oi01->bf01", "f10b_1o0i->1fb0", "b0f_0io->fb0",
                           "0b21f_i210o->2b0f1", "bf_io->bf", "fb_oi->bf"}) {
    const auto parsed = ParseConvolutionDimLabels(text, &error);
    ASSERT_TRUE(parsed) << text << ": " << error;
    EXPECT_EQ(ConvolutionDimLabelsString(*parsed), text);
  }
  const auto swapped = ParseConvolutionDimLabels("f10b_1o0i->1fb0", &error);
  EXPECT_EQ(swapped->input_spatial_dimensions, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(swapped->kernel_spatial_dimensions, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(swapped->output_spatial_dimensions, (std::vector<int64_t>{3, 0}));
}

TEST(ConvolutionDimLabelsTest, MalformedLabelsSayWhatIsWrong) {
  std::string error;
  EXPECT_FALSE(ParseConvolutionDimLabels("b01f01io->b01f", &error));
  EXPECT_TRUE(Mentions(error, "lhs_rhs->out")) << error;
  EXPECT_FALSE(ParseConvolutionDimLabels("b01f_01io-b01f", &error));
  EXPECT_TRUE(Mentions(error, "lhs_rhs->out")) << error;
  EXPECT_FALSE(ParseConvolutionDimLabels("b01f_0io->b01f", &error));
  EXPECT_TRUE(Mentions(error, "must have one rank")) << error;
  EXPECT_FALSE(ParseConvolutionDimLabels("b00f_01io->b01f", &error));
  EXPECT_TRUE(Mentions(error, "name '0' twice")) << error;
  EXPECT_FALSE(ParseConvolutionDimLabels("b02f_01io->b01f", &error));
  EXPECT_TRUE(Mentions(error, "the input labels 'b02f' hold '2'")) << error;
  EXPECT_FALSE(ParseConvolutionDimLabels("b01f_01ib->b01f", &error));
  EXPECT_TRUE(Mentions(error, "kernel labels")) << error;
  EXPECT_FALSE(ParseConvolutionDimLabels("b01f_01io->b01b", &error));
  EXPECT_TRUE(Mentions(error, "output labels")) << error;
  EXPECT_FALSE(ParseConvolutionDimLabels("b_i->b", &error));
  EXPECT_TRUE(Mentions(error, "need at least")) << error;
}

}  // namespace
}  // namespace weft
