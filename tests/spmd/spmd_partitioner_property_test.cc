// Property: random chains of elementwise, dot, reduce, reshape, transpose,
// broadcast and slice ops with random shardings on 1..8 devices give the
// unsharded answer.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "partitioner_random.h"
#include "partitioner_test_util.h"

namespace weft::spmd_test {
namespace {

std::string Dims(const std::vector<int64_t>& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s;
}

// Builds a random module; every value is f32 of rank 1..3.
std::string RandomChain(int64_t n, std::mt19937_64& rng) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto sharding = [&](int64_t rank) { return RandomSharding(n, rank, rng).ToString(); };
  std::string body;
  int64_t params = 0, next = 0;
  std::vector<int64_t> dims;
  for (int64_t r = pick(1, 3); r > 0; --r) dims.push_back(pick(1, 6));
  std::string cur = "v0";
  body += fmt::format("  v0 = f32[{}] parameter({}), sharding={}\n", Dims(dims), params++,
                      sharding(dims.size()));
  for (int step = 0, steps = static_cast<int>(pick(3, 6)); step < steps; ++step) {
    const std::string name = fmt::format("v{}", ++next);
    const int64_t rank = static_cast<int64_t>(dims.size());
    switch (pick(0, 6)) {
      case 0: {  // elementwise with a fresh parameter
        const std::string p = fmt::format("p{}", params);
        body += fmt::format("  {} = f32[{}] parameter({}), sharding={}\n", p, Dims(dims), params++,
                            sharding(rank));
        body += fmt::format("  {} = f32[{}] multiply({}, {}), sharding={}\n", name, Dims(dims), cur,
                            p, sharding(rank));
        break;
      }
      case 1: {  // dot contracting the last dim with a fresh [K, N] parameter
        const int64_t k = dims.back(), c = pick(1, 5);
        const std::string p = fmt::format("p{}", params);
        body += fmt::format("  {} = f32[{},{}] parameter({}), sharding={}\n", p, k, c, params++,
                            sharding(2));
        dims.back() = c;
        body += fmt::format(
            "  {} = f32[{}] dot({}, {}), lhs_contracting_dims={{{}}}, rhs_contracting_dims={{0}}, "
            "sharding={}\n",
            name, Dims(dims), cur, p, rank - 1, sharding(rank));
        break;
      }
      case 2: {  // reduce one dim (keep rank >= 1)
        if (rank == 1) continue;
        const int64_t d = pick(0, rank - 1);
        dims.erase(dims.begin() + d);
        body += fmt::format(
            "  {} = f32[{}] reduce({}, zero), dimensions={{{}}}, to_apply=add, sharding={}\n", name,
            Dims(dims), cur, d, sharding(rank - 1));
        break;
      }
      case 3: {  // reshape: merge the first two dims, or split a dim of even size
        std::vector<int64_t> out = dims;
        if (rank >= 2 && pick(0, 1) == 0) {
          out[0] *= out[1];
          out.erase(out.begin() + 1);
        } else if (rank < 3 && dims[0] % 2 == 0) {
          out[0] /= 2;
          out.insert(out.begin(), 2);
        } else {
          continue;
        }
        dims = out;
        body += fmt::format("  {} = f32[{}] reshape({}), sharding={}\n", name, Dims(dims), cur,
                            sharding(dims.size()));
        break;
      }
      case 4: {  // transpose
        std::vector<int64_t> perm(rank);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        std::vector<int64_t> out;
        for (int64_t d : perm) out.push_back(dims[d]);
        dims = out;
        body += fmt::format("  {} = f32[{}] transpose({}), dimensions={{{}}}, sharding={}\n", name,
                            Dims(dims), cur, Dims(perm), sharding(rank));
        break;
      }
      case 5: {  // broadcast a new leading dim
        if (rank == 3) continue;
        std::vector<int64_t> map(rank);
        std::iota(map.begin(), map.end(), 1);
        dims.insert(dims.begin(), pick(1, 3));
        body += fmt::format("  {} = f32[{}] broadcast({}), dimensions={{{}}}, sharding={}\n", name,
                            Dims(dims), cur, Dims(map), sharding(rank + 1));
        break;
      }
      default: {  // slice one dim
        const int64_t d = pick(0, rank - 1);
        const int64_t start = pick(0, dims[d] - 1), limit = pick(start + 1, dims[d]);
        std::string slice;
        for (int64_t i = 0; i < rank; ++i) {
          slice +=
              fmt::format("{}[{}:{}]", i ? ", " : "", i == d ? start : 0, i == d ? limit : dims[i]);
        }
        dims[d] = limit - start;
        body += fmt::format("  {} = f32[{}] slice({}), slice={{{}}}, sharding={}\n", name,
                            Dims(dims), cur, slice, sharding(rank));
        break;
      }
    }
    cur = name;
  }
  body += fmt::format("  ROOT out = f32[{}] negate({}), sharding={}\n", Dims(dims), cur,
                      sharding(dims.size()));
  return fmt::format(R"(HloModule chain
add {{
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}}
ENTRY main {{
  zero = f32[] constant(0)
{}}}
)",
                     body);
}

TEST(SpmdPropertyTest, RandomChainsMatchUnsharded) {
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    const std::string text = RandomChain(n, rng);
    SCOPED_TRACE(fmt::format("trial {} on {} devices:\n{}", trial, n, text));
    ExpectShardedEqualsUnsharded(text, n, trial);
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace
}  // namespace weft::spmd_test
