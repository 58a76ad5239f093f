#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <functional>

#include "error_of.h"
#include "executor_test_util.h"

namespace weft::runtime {
namespace {

using testing::ExpectEqual;
using testing::Random;
using testing::Ravel;
using testing::RunNamed;
using testing::Unravel;
using weft::testing::ErrorOf;
using weft::testing::Mentions;

// out[i] = x[f(i)] over the output's multi-indices.
std::vector<double> Gather(const HostTensor& x, const std::vector<int64_t>& out_dims,
                           const std::function<std::vector<int64_t>(std::vector<int64_t>)>& f) {
  int64_t n = 1;
  for (int64_t d : out_dims) n *= d;
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i)
    out.push_back(x.GetDouble(Ravel(f(Unravel(i, out_dims)), x.dimensions())));
  return out;
}

TEST(EvalShapeOpsTest, BroadcastIntoAnyDims) {
  const char* text = R"(HloModule m
ENTRY e {
  s = f32[] parameter(0)
  v = f32[5] parameter(1)
  m = f32[3,5] parameter(2)
  scalar = f32[2,3] broadcast(s), dimensions={}
  lead = f32[4,3,5] broadcast(m), dimensions={1,2}
  trail = f32[5,7] broadcast(v), dimensions={0}
  middle = f32[2,5,3] broadcast(v), dimensions={1}
  ROOT outer = f32[3,2,5] broadcast(m), dimensions={0,2}
})";
  std::mt19937 rng(1);
  HostTensor s = Random("f32[]", rng), v = Random("f32[5]", rng), m = Random("f32[3,5]", rng);
  auto out = RunNamed(text, {s, v, m}, {"scalar", "lead", "trail", "middle", "outer"});
  ExpectEqual(out["scalar"], std::vector<double>(6, s.GetDouble(0)));
  ExpectEqual(out["lead"], Gather(m, {4, 3, 5}, [](auto i) {
                return std::vector<int64_t>{i[1], i[2]};
              }));
  ExpectEqual(out["trail"], Gather(v, {5, 7}, [](auto i) { return std::vector<int64_t>{i[0]}; }));
  ExpectEqual(out["middle"],
              Gather(v, {2, 5, 3}, [](auto i) { return std::vector<int64_t>{i[1]}; }));
  ExpectEqual(out["outer"], Gather(m, {3, 2, 5}, [](auto i) {
                return std::vector<int64_t>{i[0], i[2]};
              }));
}

TEST(EvalShapeOpsTest, TransposeAndReshape) {
  const char* text = R"(HloModule m
ENTRY e {
  x = f32[2,3,4,5] parameter(0)
  t = f32[5,2,4,3] transpose(x), dimensions={3,0,2,1}
  r = f32[6,20] reshape(x)
  big = bf16[70,130] parameter(1)
  bt = bf16[130,70] transpose(big), dimensions={1,0}
  ROOT inner = f32[2,3,5,4] transpose(x), dimensions={0,1,3,2}
})";
  std::mt19937 rng(2);
  HostTensor x = Random("f32[2,3,4,5]", rng), big = Random("bf16[70,130]", rng);
  auto out = RunNamed(text, {x, big}, {"t", "r", "bt", "inner"});
  ExpectEqual(out["t"], Gather(x, {5, 2, 4, 3}, [](auto i) {
                return std::vector<int64_t>{i[1], i[3], i[2], i[0]};
              }));
  ExpectEqual(out["r"], x.ToDoubles());
  ExpectEqual(out["bt"], Gather(big, {130, 70}, [](auto i) {
                return std::vector<int64_t>{i[1], i[0]};
              }));
  ExpectEqual(out["inner"], Gather(x, {2, 3, 5, 4}, [](auto i) {
                return std::vector<int64_t>{i[0], i[1], i[3], i[2]};
              }));
}

TEST(EvalShapeOpsTest, SliceWithStridesAndContiguousRanges) {
  const char* text = R"(HloModule m
ENTRY e {
  x = s32[6,8] parameter(0)
  strided = s32[2,3] slice(x), slice={[1:6:3], [0:8:3]}
  rows = s32[2,8] slice(x), slice={[2:4], [0:8]}
  cols = s32[6,2] slice(x), slice={[0:6], [5:7]}
  ROOT one = s32[1,3] slice(x), slice={[4:5], [2:5]}
})";
  std::mt19937 rng(3);
  HostTensor x = Random("s32[6,8]", rng, -100, 100);
  auto out = RunNamed(text, {x}, {"strided", "rows", "cols", "one"});
  ExpectEqual(out["strided"], Gather(x, {2, 3}, [](auto i) {
                return std::vector<int64_t>{1 + 3 * i[0], 3 * i[1]};
              }));
  ExpectEqual(out["rows"], Gather(x, {2, 8}, [](auto i) {
                return std::vector<int64_t>{2 + i[0], i[1]};
              }));
  ExpectEqual(out["cols"], Gather(x, {6, 2}, [](auto i) {
                return std::vector<int64_t>{i[0], 5 + i[1]};
              }));
  ExpectEqual(out["one"], Gather(x, {1, 3}, [](auto i) {
                return std::vector<int64_t>{4, 2 + i[1]};
              }));
}

TEST(EvalShapeOpsTest, DynamicSliceAndUpdateClampStarts) {
  const char* text = R"(HloModule m
ENTRY e {
  x = f32[5,6] parameter(0)
  i = s32[] parameter(1)
  j = s32[] parameter(2)
  ds = f32[2,3] dynamic-slice(x, i, j), dynamic_slice_sizes={2,3}
  u = f32[2,3] parameter(3)
  ROOT dus = f32[5,6] dynamic-update-slice(x, u, i, j)
})";
  std::mt19937 rng(4);
  HostTensor x = Random("f32[5,6]", rng), u = Random("f32[2,3]", rng);
  // (1, 2) in range; (4, -3) clamps to (3, 0); (9, 9) clamps to (3, 3).
  for (auto [i, j] : std::vector<std::pair<int, int>>{{1, 2}, {4, -3}, {9, 9}}) {
    const int64_t ci = std::clamp(i, 0, 3), cj = std::clamp(j, 0, 3);
    auto out = RunNamed(text,
                        {x, HostTensor::Scalar(PrimitiveType::kS32, i),
                         HostTensor::Scalar(PrimitiveType::kS32, j), u},
                        {"ds", "dus"});
    ExpectEqual(out["ds"], Gather(x, {2, 3}, [&](auto k) {
                  return std::vector<int64_t>{ci + k[0], cj + k[1]};
                }));
    std::vector<double> want = x.ToDoubles();
    for (int64_t a = 0; a < 2; ++a) {
      for (int64_t b = 0; b < 3; ++b) want[(ci + a) * 6 + cj + b] = u.GetDouble(a * 3 + b);
    }
    ExpectEqual(out["dus"], want);
  }
  // The input itself is never written, even though the update could be in place.
  EXPECT_NE(x.GetDouble(0), 0);
}

TEST(EvalShapeOpsTest, ConcatenateAlongEachDim) {
  const char* text = R"(HloModule m
ENTRY e {
  a = bf16[2,3,4] parameter(0)
  b = bf16[2,1,4] parameter(1)
  c = bf16[2,2,4] parameter(2)
  mid = bf16[2,6,4] concatenate(a, b, c), dimensions={1}
  first = bf16[4,3,4] concatenate(a, a), dimensions={0}
  ROOT last = bf16[2,3,8] concatenate(a, a), dimensions={2}
})";
  std::mt19937 rng(5);
  HostTensor a = Random("bf16[2,3,4]", rng), b = Random("bf16[2,1,4]", rng),
             c = Random("bf16[2,2,4]", rng);
  auto out = RunNamed(text, {a, b, c}, {"mid", "first", "last"});
  std::vector<double> mid;
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 6; ++j) {
      for (int64_t k = 0; k < 4; ++k) {
        mid.push_back(j < 3   ? a.GetDouble((i * 3 + j) * 4 + k)
                      : j < 4 ? b.GetDouble(i * 4 + k)
                              : c.GetDouble((i * 2 + j - 4) * 4 + k));
      }
    }
  }
  ExpectEqual(out["mid"], mid);
  ExpectEqual(out["first"], Gather(a, {4, 3, 4}, [](auto i) {
                return std::vector<int64_t>{i[0] % 2, i[1], i[2]};
              }));
  ExpectEqual(out["last"], Gather(a, {2, 3, 8}, [](auto i) {
                return std::vector<int64_t>{i[0], i[1], i[2] % 4};
              }));
}

TEST(EvalShapeOpsTest, PadWithInteriorAndNegativeEdges) {
  const char* text = R"(HloModule m
ENTRY e {
  x = f32[3,4] parameter(0)
  v = f32[] parameter(1)
  grow = f32[8,7] pad(x, v), padding=1_2_1x0_3
  ROOT crop = f32[2,9] pad(x, v), padding=-1_0x-2_1_2
})";
  std::mt19937 rng(6);
  HostTensor x = Random("f32[3,4]", rng), v = Random("f32[]", rng);
  auto out = RunNamed(text, {x, v}, {"grow", "crop"});
  // Element (i, j) of x lands at (low + i * (interior + 1), ...).
  auto padded = [&](int64_t rows, int64_t cols, int64_t lo0, int64_t in0, int64_t lo1,
                    int64_t in1) {
    std::vector<double> want(rows * cols, v.GetDouble(0));
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        const int64_t r = lo0 + i * (in0 + 1), c = lo1 + j * (in1 + 1);
        if (r >= 0 && r < rows && c >= 0 && c < cols) want[r * cols + c] = x.GetDouble(i * 4 + j);
      }
    }
    return want;
  };
  ExpectEqual(out["grow"], padded(8, 7, 1, 1, 0, 0));
  ExpectEqual(out["crop"], padded(2, 9, -1, 0, -2, 2));
}

TEST(EvalShapeOpsTest, IotaAlongEachDimAndType) {
  const char* text = R"(HloModule m
ENTRY e {
  a = s32[3,4] iota(), iota_dimension=0
  b = f32[3,4] iota(), iota_dimension=1
  ROOT c = bf16[2,3,5] iota(), iota_dimension=1
})";
  auto out = RunNamed(text, {}, {"a", "b", "c"});
  std::vector<double> a, b, c;
  for (int64_t i = 0; i < 12; ++i) {
    a.push_back(i / 4);
    b.push_back(i % 4);
  }
  for (int64_t i = 0; i < 30; ++i) c.push_back((i / 5) % 3);
  ExpectEqual(out["a"], a);
  ExpectEqual(out["b"], b);
  ExpectEqual(out["c"], c);
}

TEST(EvalShapeOpsTest, BitcastConvertReinterpretsTheBytes) {
  const char* text = R"(HloModule m
ENTRY e {
  x = f32[3,4] parameter(0)
  i = s32[3,4] bitcast-convert(x)
  halves = u16[3,4,2] bitcast-convert(x)
  back = f32[3,4] bitcast-convert(halves)
  d = f64[3,2] parameter(1)
  ROOT words = u32[3,2,2] bitcast-convert(d)
})";
  std::mt19937 rng(6);
  HostTensor x = Random("f32[3,4]", rng, -100, 100);
  HostTensor d = Random("f64[3,2]", rng, -1e10, 1e10);
  auto out = RunNamed(text, {x, d}, {"i", "halves", "back", "words"});
  std::vector<double> bits, halves, words;
  for (int64_t k = 0; k < x.element_count(); ++k) {
    const uint32_t b = std::bit_cast<uint32_t>(x.data<float>()[k]);
    bits.push_back(static_cast<int32_t>(b));
    halves.push_back(b & 0xffff);  // memory order: the low half first (little-endian)
    halves.push_back(b >> 16);
  }
  for (int64_t k = 0; k < d.element_count(); ++k) {
    const uint64_t b = std::bit_cast<uint64_t>(d.data<double>()[k]);
    words.push_back(static_cast<double>(b & 0xffffffffu));
    words.push_back(static_cast<double>(b >> 32));
  }
  ExpectEqual(out["i"], bits, "s32");
  ExpectEqual(out["halves"], halves, "u16 halves");
  ExpectEqual(out["back"], x.ToDoubles(), "round trip");
  ExpectEqual(out["words"], words, "u32 words");
}

TEST(EvalShapeOpsTest, Reverse) {
  const char* text = R"(HloModule m
ENTRY e {
  x = s64[3,4,2] parameter(0)
  ROOT r = s64[3,4,2] reverse(x), dimensions={0,2}
})";
  std::mt19937 rng(7);
  HostTensor x = Random("s64[3,4,2]", rng, -1000, 1000);
  auto out = RunNamed(text, {x}, {"r"});
  ExpectEqual(out["r"], Gather(x, {3, 4, 2}, [](auto i) {
                return std::vector<int64_t>{2 - i[0], i[1], 1 - i[2]};
              }));
}

// Copies of several 128 KiB parts run on the thread pool, split along their
// outermost dim (StridedCopy): every kind of copy gives the same elements.
TEST(EvalShapeOpsTest, LargeCopiesRunInPartsAndGiveTheSameElements) {
  const char* text = R"(HloModule m
ENTRY e {
  x = f32[96,40,64] parameter(0)
  t = f32[64,96,40] transpose(x), dimensions={2,0,1}
  r = f32[96,40,64] reverse(x), dimensions={0,2}
  s = f32[47,40,32] slice(x), slice={[1:95:2], [0:40], [1:64:2]}
  v = f32[40,64] parameter(1)
  b = f32[96,40,64] broadcast(v), dimensions={1,2}
  u = f32[80,40,64] parameter(2)
  i = s32[] parameter(3)
  zero = s32[] constant(0)
  ROOT dus = f32[96,40,64] dynamic-update-slice(x, u, i, zero, zero)
})";
  std::mt19937 rng(8);
  HostTensor x = Random("f32[96,40,64]", rng), v = Random("f32[40,64]", rng),
             u = Random("f32[80,40,64]", rng);
  auto out = RunNamed(text, {x, v, u, HostTensor::Scalar(PrimitiveType::kS32, 11)},
                      {"t", "r", "s", "b", "dus"});
  ExpectEqual(out["t"], Gather(x, {64, 96, 40}, [](auto k) {
                return std::vector<int64_t>{k[1], k[2], k[0]};
              }));
  ExpectEqual(out["r"], Gather(x, {96, 40, 64}, [](auto k) {
                return std::vector<int64_t>{95 - k[0], k[1], 63 - k[2]};
              }));
  ExpectEqual(out["s"], Gather(x, {47, 40, 32}, [](auto k) {
                return std::vector<int64_t>{1 + 2 * k[0], k[1], 1 + 2 * k[2]};
              }));
  ExpectEqual(out["b"], Gather(v, {96, 40, 64}, [](auto k) {
                return std::vector<int64_t>{k[1], k[2]};
              }));
  std::vector<double> want = x.ToDoubles();
  const std::vector<double> update = u.ToDoubles();
  std::copy(update.begin(), update.end(), want.begin() + 11 * 40 * 64);
  ExpectEqual(out["dus"], want);
}

// Tokens thread through after-all (from nothing, one or several tokens), a
// token parameter and the root: they hold no bytes and the data beside them
// is computed as if they were absent.
TEST(EvalShapeOpsTest, AfterAllMakesTokensThatThreadThroughTheProgram) {
  const char* text = R"(HloModule tokens
ENTRY e {
  x = f32[6] parameter(0)
  given = token[] parameter(1)
  t0 = token[] after-all()
  n = f32[6] negate(x)
  t1 = token[] after-all(t0)
  t2 = token[] after-all(t0, t1, given)
  ROOT r = (f32[6], token[]) tuple(n, t2)
})";
  std::mt19937 rng(5);
  const HostTensor x = Random("f32[6]", rng);
  const std::vector<HostTensor> out =
      testing::RunText(text, {x, HostTensor(Shape::Scalar(PrimitiveType::kToken))});
  ASSERT_EQ(out.size(), 2u);
  std::vector<double> want;
  for (double v : x.ToDoubles()) want.push_back(-v);
  ExpectEqual(out[0], want);
  EXPECT_EQ(out[1].shape(), Shape::Scalar(PrimitiveType::kToken));
  EXPECT_EQ(out[1].byte_size(), 0);
}

// AllocateBuffer gives a buffer of its shape (contents unspecified) that a
// later instruction fills; the program's values do not depend on it. A call
// with an operand or a tuple result is refused when the executor is built.
TEST(EvalShapeOpsTest, AllocateBufferGivesABufferThatIsThenWritten) {
  const char* text = R"(HloModule alloc
ENTRY e {
  x = f32[3,4] parameter(0)
  buf = f32[3,4] custom-call(), custom_call_target="AllocateBuffer"
  z = s32[] constant(0)
  ROOT w = f32[3,4] dynamic-update-slice(buf, x, z, z)
})";
  std::mt19937 rng(6);
  for (int run = 0; run < 2; ++run) {
    const HostTensor x = Random("f32[3,4]", rng);
    const std::vector<HostTensor> out = testing::RunText(text, {x});
    ASSERT_EQ(out.size(), 1u);
    ExpectEqual(out[0], x.ToDoubles());
  }
  const std::string with_operand = ErrorOf([] {
    testing::RunText(R"(HloModule bad
ENTRY e {
  x = f32[3] parameter(0)
  ROOT buf = f32[3] custom-call(x), custom_call_target="AllocateBuffer"
})",
                     {HostTensor(Shape(PrimitiveType::kF32, {3}))});
  });
  EXPECT_TRUE(Mentions(with_operand, "takes no operand")) << with_operand;
}

TEST(EvalShapeOpsTest, MemorySpaceMovesPassTheValue) {
  // XLA's host offloading: weft's devices have one memory, so a move to the
  // host and back, or a pin, leaves every value as it was.
  const char* text = R"(HloModule offload
ENTRY e {
  x = f32[3,4] parameter(0)
  h = f32[3,4] custom-call(x), custom_call_target="MoveToHost"
  n = f32[3,4] negate(h)
  d = f32[3,4] custom-call(n), custom_call_target="MoveToDevice"
  ROOT p = f32[3,4] custom-call(d), custom_call_target="PinToDevice"
})";
  std::mt19937 rng(8);
  const HostTensor x = Random("f32[3,4]", rng);
  std::vector<double> want = x.ToDoubles();
  for (double& v : want) v = -v;
  const std::vector<HostTensor> out = testing::RunText(text, {x});
  ASSERT_EQ(out.size(), 1u);
  ExpectEqual(out[0], want);
  const std::string reshaped = ErrorOf([] {
    testing::RunText(R"(HloModule bad
ENTRY e {
  x = f32[3,4] parameter(0)
  ROOT h = f32[12] custom-call(x), custom_call_target="MoveToHost"
})",
                     {HostTensor(Shape(PrimitiveType::kF32, {3, 4}))});
  });
  EXPECT_TRUE(Mentions(reshaped, "an array of its shape")) << reshaped;
}

}  // namespace
}  // namespace weft::runtime
