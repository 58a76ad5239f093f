// Running a fusion plan a tile at a time: each fused module must give the
// bits of the same instructions run unfused (broadcast fast paths and the
// general path, iota, splatted scalars, converts, bf16 rounding, pred and
// s32, tile and thread-chunk boundaries, chains of index maps, column bands).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "executor_test_util.h"
#include "fusion_test_util.h"
#include "weft/base/error.h"

namespace weft::runtime {
namespace {

using fusion_testing::Case;
using fusion_testing::ExpectSameBits;
using testing::Parse;

// Every broadcast path, at sizes that cut tiles (2048) mid-row and, the
// largest, span several thread-pool chunks.
TEST(FusionTiles, BroadcastsMatchUnfused) {
  struct Bcast {
    std::vector<int64_t> operand_dims;  // indices into the output dims
  };
  const std::vector<std::vector<int64_t>> shapes = {{5, 77, 33}, {3, 129, 111}, {7}, {1, 4099}};
  uint32_t seed = 1;
  for (const std::vector<int64_t>& dims : shapes) {
    const int64_t rank = static_cast<int64_t>(dims.size());
    std::vector<std::vector<int64_t>> maps = {{}};  // scalar
    for (int64_t mask = 1; mask < (1 << rank); ++mask) {
      std::vector<int64_t> m;
      for (int64_t d = 0; d < rank; ++d) {
        if (mask & (1 << d)) m.push_back(d);
      }
      maps.push_back(m);
    }
    for (const char* type : {"f32", "bf16", "s32", "pred"}) {
      for (const std::vector<int64_t>& map : maps) {
        std::vector<int64_t> small;
        for (int64_t d : map) small.push_back(dims[d]);
        const std::string full = fmt::format("{}[{}]", type, fmt::join(dims, ","));
        const std::string op = std::string(type) == "pred" ? "xor" : "multiply";
        Case c;
        c.params = {full, fmt::format("{}[{}]", type, fmt::join(small, ","))};
        c.body = {fmt::format("b = {} broadcast(p1), dimensions={{{}}}", full, fmt::join(map, ",")),
                  fmt::format("ROOT r = {} {}(p0, b)", full, op)};
        c.result = full;
        SCOPED_TRACE(Fused(c));
        ExpectSameBits(c, seed++);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Index maps (reshape, transpose, slice, reverse, concatenate, pad and a
// broadcast of them) composed down to the parameters, in every element
// type, at sizes that cut tiles mid-row; a reshape as the root.
TEST(FusionTiles, IndexMapChainsMatchUnfused) {
  uint32_t seed = 100;
  for (const char* t : {"f32", "bf16", "s32", "pred"}) {
    const std::string op = std::string(t) == "pred" ? "xor" : "add";
    auto s = [&](const std::string& dims) { return fmt::format("{}[{}]", t, dims); };
    std::vector<Case> cases;
    // transpose of a slice of a reshape, added to a reversed parameter
    cases.push_back({{s("61,4,70"), s("70,61,3")},
                     {fmt::format("r = {} reshape(p0)", s("61,280")),
                      fmt::format("sl = {} slice(r), slice={{[0:61], [7:217:3]}}", s("61,70")),
                      fmt::format("tr = {} transpose(sl), dimensions={{1,0}}", s("70,61")),
                      fmt::format("b = {} broadcast(tr), dimensions={{0,1}}", s("70,61,3")),
                      fmt::format("rv = {} reverse(p1), dimensions={{0,2}}", s("70,61,3")),
                      fmt::format("ROOT x = {} {}(b, rv)", s("70,61,3"), op)},
                     s("70,61,3")});
    // concatenate of a padded slice and a transposed parameter (RoPE-like halves)
    cases.push_back({{s("37,128"), s("64,37"), s("")},
                     {fmt::format("lo = {} slice(p0), slice={{[0:37], [64:128]}}", s("37,64")),
                      fmt::format("pd = {} pad(lo, p2), padding=0_0x-1_1_0", s("37,64")),
                      fmt::format("tr = {} transpose(p1), dimensions={{1,0}}", s("37,64")),
                      fmt::format("c = {} concatenate(pd, tr), dimensions={{1}}", s("37,128")),
                      fmt::format("ROOT x = {} {}(c, p0)", s("37,128"), op)},
                     s("37,128")});
    // RoPE on a projection's own layout: pairs reversed (a periodic map),
    // a table broadcast over the heads, in a chain under a transpose (the
    // periodic map read at gathered indices) and as a slice's operand
    cases.push_back({{s("3,67,5,2"), s("3,5,2")},
                     {fmt::format("rv = {} reverse(p0), dimensions={{3}}", s("3,67,5,2")),
                      fmt::format("b = {} broadcast(p1), dimensions={{0,2,3}}", s("3,67,5,2")),
                      fmt::format("m = {} {}(rv, b)", s("3,67,5,2"), op),
                      fmt::format("t = {} transpose(rv), dimensions={{1,0,2,3}}", s("67,3,5,2")),
                      fmt::format("tt = {} transpose(t), dimensions={{1,0,2,3}}", s("3,67,5,2")),
                      fmt::format("e = {} {}(m, tt)", s("3,67,5,2"), op),
                      fmt::format("ROOT x = {} {}(e, p0)", s("3,67,5,2"), op)},
                     s("3,67,5,2")});
    // RoPE under sequence parallelism: the heads transposed out of the
    // all-to-all's layout, pairs reversed through a reshape (rows of 40
    // and a period of 5600: neither a row copy nor a periodic map), a
    // table broadcast over batch and heads
    cases.push_back({{s("3,2,70,40"), s("70,20,2")},
                     {fmt::format("t = {} transpose(p0), dimensions={{0,2,1,3}}", s("3,70,2,40")),
                      fmt::format("r = {} reshape(t)", s("3,70,2,20,2")),
                      fmt::format("rv = {} reverse(r), dimensions={{4}}", s("3,70,2,20,2")),
                      fmt::format("b = {} broadcast(p1), dimensions={{1,3,4}}", s("3,70,2,20,2")),
                      fmt::format("m = {} {}(rv, b)", s("3,70,2,20,2"), op),
                      fmt::format("ROOT x = {} {}(m, r)", s("3,70,2,20,2"), op)},
                     s("3,70,2,20,2")});
    // interior and edge padding, then an elementwise op and a reshape root
    cases.push_back({{s("20,33"), s("41,35"), s("")},
                     {fmt::format("pd = {} pad(p0, p2), padding=1_1_1x2_0", s("41,35")),
                      fmt::format("e = {} {}(pd, p1)", s("41,35"), op),
                      fmt::format("ROOT x = {} reshape(e)", s("1435"))},
                     s("1435")});
    for (const Case& c : cases) {
      SCOPED_TRACE(Fused(c));
      ExpectSameBits(c, seed++);
      if (HasFatalFailure()) return;
    }
  }
}

// Pads of the innermost dimension only and concatenates along it, of
// parameters (through reshapes), are copied a column band at a time: RoPE's
// pairs (one column each), several bands of different widths, negative
// padding that crops, in every element type; rows cut by tiles.
TEST(FusionTiles, ColumnBandsMatchUnfused) {
  uint32_t seed = 300;
  for (const char* t : {"f32", "bf16", "s32", "pred"}) {
    const std::string op = std::string(t) == "pred" ? "xor" : "add";
    auto s = [&](const std::string& dims) { return fmt::format("{}[{}]", t, dims); };
    std::vector<Case> cases;
    // RoPE's gradient: two single-column halves padded into pairs and added
    cases.push_back({{s("7,8,131"), s("7,8,131"), s("")},
                     {fmt::format("a = {} reshape(p0)", s("7,8,131,1")),
                      fmt::format("b = {} reshape(p1)", s("7,8,131,1")),
                      fmt::format("pa = {} pad(a, p2), padding=0_0x0_0x0_0x0_1", s("7,8,131,2")),
                      fmt::format("pb = {} pad(b, p2), padding=0_0x0_0x0_0x1_0", s("7,8,131,2")),
                      fmt::format("ROOT x = {} {}(pa, pb)", s("7,8,131,2"), op)},
                     s("7,8,131,2")});
    // three bands of widths 3, 5 and 1
    cases.push_back({{s("9,70,3"), s("9,70,5"), s("9,70,1"), s("9,70,9")},
                     {fmt::format("c = {} concatenate(p0, p1, p2), dimensions={{2}}", s("9,70,9")),
                      fmt::format("ROOT x = {} {}(c, p3)", s("9,70,9"), op)},
                     s("9,70,9")});
    // negative low padding crops, a single column offset inside wider rows
    cases.push_back({{s("5,301,40"), s("5,301,1"), s(""), s("5,301,44")},
                     {fmt::format("pa = {} pad(p0, p2), padding=0_0x0_0x-3_7", s("5,301,44")),
                      fmt::format("pb = {} pad(p1, p2), padding=0_0x0_0x2_41", s("5,301,44")),
                      fmt::format("e = {} {}(pa, pb)", s("5,301,44"), op),
                      fmt::format("ROOT x = {} {}(e, p3)", s("5,301,44"), op)},
                     s("5,301,44")});
    for (const Case& c : cases) {
      SCOPED_TRACE(Fused(c));
      ExpectSameBits(c, seed++);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(FusionTiles, ChainsInBf16RoundEveryResult) {
  // Unrounded f32 intermediates would differ from the unfused bf16 program.
  Case c;
  c.params = {"bf16[33,257]", "bf16[257]", "bf16[33,257]"};
  c.body = {"e = bf16[33,257] exponential(p0)", "b = bf16[33,257] broadcast(p1), dimensions={1}",
            "m = bf16[33,257] multiply(e, b)",  "t = bf16[33,257] tanh(m)",
            "d = bf16[33,257] divide(t, p2)",   "s = bf16[33,257] subtract(d, e)",
            "ROOT r = bf16[33,257] add(s, m)"};
  c.result = "bf16[33,257]";
  ExpectSameBits(c, 7);
}

TEST(FusionTiles, Bf16SourcesReadAsBitsMatchUnfused) {
  // a and b (through a reshape) are read only by arithmetic, so the tile
  // keeps their bf16 bits; c is also compared and selected, so it is widened.
  Case c;
  c.params = {"bf16[37,129]", "bf16[4773]", "bf16[37,129]", "bf16[37,129]"};
  c.body = {"rb = bf16[37,129] reshape(p1)",      "m = bf16[37,129] multiply(p0, rb)",
            "n = bf16[37,129] logistic(p0)",      "lt = pred[37,129] compare(p2, m), direction=LT",
            "s = bf16[37,129] select(lt, n, p2)", "ROOT r = bf16[37,129] subtract(s, p3)"};
  c.result = "bf16[37,129]";
  ExpectSameBits(c, 5);
}

TEST(FusionTiles, IotaConvertsAndIntegers) {
  for (int64_t d = 0; d < 3; ++d) {
    Case c;
    c.params = {"f32[6,50,41]", "bf16[6,50,41]"};
    c.body = {fmt::format("i = s32[6,50,41] iota(), iota_dimension={}", d),
              "j = s32[6,50,41] convert(p0)",
              "k = s32[6,50,41] multiply(i, j)",
              "three = s32[] constant(3)",
              "tb = s32[6,50,41] broadcast(three), dimensions={}",
              "q = s32[6,50,41] divide(k, tb)",
              "lt = pred[6,50,41] compare(q, i), direction=LT",
              "f = bf16[6,50,41] convert(q)",
              "h = f16[6,50,41] convert(p1)",
              "hf = bf16[6,50,41] convert(h)",
              "n = bf16[6,50,41] negate(hf)",
              "s = bf16[6,50,41] select(lt, f, n)",
              "ROOT r = f32[6,50,41] convert(s)"};
    c.result = "f32[6,50,41]";
    SCOPED_TRACE(d);
    ExpectSameBits(c, 11 + static_cast<uint32_t>(d));
  }
}

// Cross-entropy's pick of the target's logit: iota along the last
// dimension plus this device's vocabulary offset, compared with the targets,
// selects one logit a row (or none: the target is another device's), summed
// by an input fusion; beside it an f32 iota along the last dimension. Checked
// against the picked values themselves; rows of 37 cut the 2048-element tiles
// mid-row.
TEST(FusionTiles, OneHotPickAndFloatIotaMatchReference) {
  const int64_t rows = 300, vocab = 37, offset = 5;
  const std::string x_shape = fmt::format("f32[{},{}]", rows, vocab);
  const std::string text = fmt::format(
      "HloModule pick\n"
      "add_f32 {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
      "  ROOT s = f32[] add(a, b)\n}}\n"
      "fused_pick {{\n"
      "  off = s32[] parameter(0)\n  t = s32[{0}] parameter(1)\n  x = {2} parameter(2)\n"
      "  io = s32[{0},{1}] iota(), iota_dimension=1\n"
      "  ob = s32[{0},{1}] broadcast(off), dimensions={{}}\n"
      "  i2 = s32[{0},{1}] add(io, ob)\n"
      "  tb = s32[{0},{1}] broadcast(t), dimensions={{0}}\n"
      "  c = pred[{0},{1}] compare(i2, tb), direction=EQ\n"
      "  z = f32[] constant(0)\n  zb = f32[{0},{1}] broadcast(z), dimensions={{}}\n"
      "  sel = f32[{0},{1}] select(c, x, zb)\n"
      "  ROOT r = f32[{0}] reduce(sel, z), dimensions={{1}}, to_apply=add_f32\n}}\n"
      "fused_iota {{\n  x = {2} parameter(0)\n"
      "  fi = f32[{0},{1}] iota(), iota_dimension=1\n"
      "  ROOT m = f32[{0},{1}] multiply(fi, x)\n}}\n"
      "ENTRY main {{\n"
      "  off = s32[] parameter(0)\n  t = s32[{0}] parameter(1)\n  x = {2} parameter(2)\n"
      "  pick = f32[{0}] fusion(off, t, x), kind=kInput, calls=fused_pick\n"
      "  scaled = {2} fusion(x), kind=kLoop, calls=fused_iota\n"
      "  ROOT out = (f32[{0}], {2}) tuple(pick, scaled)\n}}\n",
      rows, vocab, x_shape);
  std::mt19937 rng(44);
  const HostTensor x = testing::Random(x_shape, rng, 0.25, 2.0);
  std::vector<int32_t> targets(rows);
  // Targets below, inside and past this device's columns [offset, offset + vocab).
  for (int32_t& t : targets) t = static_cast<int32_t>(rng() % (vocab + 2 * offset));
  std::vector<HostTensor> inputs = {
      HostTensor::FromVector<int32_t>(PrimitiveType::kS32, {}, {offset}),
      HostTensor::FromVector<int32_t>(PrimitiveType::kS32, {rows}, targets), x.Clone()};
  const std::vector<HostTensor> out = testing::Run(*Parse(text), std::move(inputs));
  const std::vector<double> xs = x.ToDoubles();
  const std::vector<double> pick = out.at(0).ToDoubles(), scaled = out.at(1).ToDoubles();
  int64_t picked = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t col = targets[r] - offset;
    const double want = col >= 0 && col < vocab ? xs[r * vocab + col] : 0.0;
    picked += col >= 0 && col < vocab;
    ASSERT_EQ(pick[r], want) << "row " << r << ", target " << targets[r];
    for (int64_t c = 0; c < vocab; ++c) {
      const double w =
          static_cast<double>(static_cast<float>(c) * static_cast<float>(xs[r * vocab + c]));
      ASSERT_EQ(scaled[r * vocab + c], w) << "row " << r << ", column " << c;
    }
  }
  EXPECT_GT(picked, rows / 2);
  EXPECT_LT(picked, rows);
}

// compare's type=TOTALORDER inside a fusion: -NaN < -inf < ... < -0 < +0
// < ... < inf < +NaN (bf16 widened to f32 keeps the order), as unfused.
TEST(FusionTiles, CompareInTotalOrder) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> v = {-nan, -inf, -2.5, -0.25, -0.0, 0.0, 0.25, 3, inf, nan};
  const size_t n = v.size();
  std::vector<double> a, b, want;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      a.push_back(v[i]);
      b.push_back(v[j]);
      want.push_back(i < j ? 1 : 0);  // LT on ranks; a float compare would differ at -0/+0 and NaN
    }
  }
  for (const char* type : {"f32", "bf16"}) {
    const std::string shape = fmt::format("{}[{}]", type, n * n);
    Case c;
    c.params = {shape, shape};
    c.body = {fmt::format("lt = pred[{}] compare(p0, p1), direction=LT, type=TOTALORDER", n * n),
              fmt::format("ROOT r = s32[{}] convert(lt)", n * n)};
    c.result = fmt::format("s32[{}]", n * n);
    const HostTensor ta = HostTensor::FromDoubles(ParseShape(shape), a);
    const HostTensor tb = HostTensor::FromDoubles(ParseShape(shape), b);
    const HostTensor got = testing::Run(*Parse(Fused(c)), {ta.Clone(), tb.Clone()}).at(0);
    testing::ExpectEqual(got, want, shape);
    ExpectSameBits(c, 21);
  }
}

TEST(FusionTiles, ScalarOperandsAreSplatted) {
  Case c;
  c.params = {"f32[9,300]", "f32[]", "f32[]", "pred[]", "f32[9,300]"};
  c.body = {"cl = f32[9,300] clamp(p1, p0, p2)", "ROOT s = f32[9,300] select(p3, cl, p4)"};
  c.result = "f32[9,300]";
  ExpectSameBits(c, 21);
  Case h = c;
  h.params = {"bf16[9,300]", "bf16[]", "bf16[]", "pred[]", "bf16[9,300]"};
  h.body = {"cl = bf16[9,300] clamp(p1, p0, p2)", "ROOT s = bf16[9,300] select(p3, cl, p4)"};
  h.result = "bf16[9,300]";
  ExpectSameBits(h, 22);
}

TEST(FusionTiles, BroadcastRoots) {
  // A broadcast root (bf16: its bits copied, not rounded through f32), in
  // the general path (a middle dimension repeated) and a fast one.
  for (const char* dims : {"0,2", "1,2"}) {
    Case c;
    c.params = {"bf16[3,70]"};
    if (std::string(dims) == "1,2") c.params = {"bf16[40,70]"};
    c.body = {fmt::format("ROOT b = bf16[3,40,70] broadcast(p0), dimensions={{{}}}", dims)};
    c.result = "bf16[3,40,70]";
    ExpectSameBits(c, 31);
  }
}

}  // namespace
}  // namespace weft::runtime
