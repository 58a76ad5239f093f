// A float64 reference of flex attention for tests: naive, O(Sq * Skv) memory,
// written from the definitions (no shared code with the kernels).
#pragma once

#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "weft/kernels/attention.h"

namespace weft::kernels::testing {

// Sets an environment variable for one scope (restores the old value).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

struct RefMods {
  std::function<bool(int64_t b, int64_t h, int64_t q, int64_t k)> mask;               // null: all
  std::function<double(double s, int64_t b, int64_t h, int64_t q, int64_t k)> score;  // null: id
  std::function<double(double s, int64_t b, int64_t h, int64_t q, int64_t k)> dscore;
};

struct RefResult {
  std::vector<double> out, lse, dq, dk, dv;
};

inline std::vector<float> RandomVector(size_t n, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

// dout/dlse may be empty (then no gradients, or dlse = 0).
inline RefResult ReferenceAttention(const AttentionDims& d, const std::vector<float>& q,
                                    const std::vector<float>& k, const std::vector<float>& v,
                                    double scale, const RefMods& mods,
                                    const std::vector<float>& dout = {},
                                    const std::vector<float>& dlse = {}) {
  const int64_t D = d.head_dim, Dv = d.value_dim, group = d.q_heads / d.kv_heads;
  const double ninf = -std::numeric_limits<double>::infinity();
  RefResult r;
  r.out.assign(d.batch * d.q_heads * d.q_len * Dv, 0.0);
  r.lse.assign(d.batch * d.q_heads * d.q_len, ninf);
  bool grads = !dout.empty();
  if (grads) {
    r.dq.assign(q.size(), 0.0);
    r.dk.assign(k.size(), 0.0);
    r.dv.assign(v.size(), 0.0);
  }
  std::vector<double> raw(d.kv_len), s(d.kv_len), p(d.kv_len), dp(d.kv_len);
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.q_heads; ++h) {
      const int64_t kvh = h / group;
      for (int64_t i = 0; i < d.q_len; ++i) {
        const int64_t qi = ((b * d.q_heads + h) * d.q_len + i);
        double m = ninf;
        for (int64_t j = 0; j < d.kv_len; ++j) {
          const int64_t kj = ((b * d.kv_heads + kvh) * d.kv_len + j);
          double dot = 0;
          for (int64_t c = 0; c < D; ++c) dot += double(q[qi * D + c]) * double(k[kj * D + c]);
          raw[j] = dot * scale;
          s[j] = mods.score ? mods.score(raw[j], b, h, i, j) : raw[j];
          if (mods.mask && !mods.mask(b, h, i, j)) s[j] = ninf;
          m = std::max(m, s[j]);
        }
        if (m == ninf) continue;  // fully masked: out 0, lse -inf, no gradient
        double sum = 0;
        for (int64_t j = 0; j < d.kv_len; ++j)
          sum += (p[j] = s[j] == ninf ? 0 : std::exp(s[j] - m));
        r.lse[qi] = m + std::log(sum);
        for (int64_t j = 0; j < d.kv_len; ++j) {
          p[j] /= sum;
          const int64_t kj = ((b * d.kv_heads + kvh) * d.kv_len + j);
          for (int64_t c = 0; c < Dv; ++c) r.out[qi * Dv + c] += p[j] * v[kj * Dv + c];
        }
        if (!grads) continue;
        double delta = 0;
        for (int64_t j = 0; j < d.kv_len; ++j) {
          const int64_t kj = ((b * d.kv_heads + kvh) * d.kv_len + j);
          dp[j] = 0;
          for (int64_t c = 0; c < Dv; ++c) dp[j] += double(dout[qi * Dv + c]) * v[kj * Dv + c];
          delta += p[j] * dp[j];
        }
        double g_lse = dlse.empty() ? 0.0 : dlse[qi];
        for (int64_t j = 0; j < d.kv_len; ++j) {
          if (p[j] == 0) continue;
          const int64_t kj = ((b * d.kv_heads + kvh) * d.kv_len + j);
          double ds = p[j] * (dp[j] - delta + g_lse);
          if (mods.dscore) ds *= mods.dscore(raw[j], b, h, i, j);
          ds *= scale;
          for (int64_t c = 0; c < D; ++c) {
            r.dq[qi * D + c] += ds * k[kj * D + c];
            r.dk[kj * D + c] += ds * q[qi * D + c];
          }
          for (int64_t c = 0; c < Dv; ++c) r.dv[kj * Dv + c] += p[j] * dout[qi * Dv + c];
        }
      }
    }
  return r;
}

// max |x - ref| / max |ref| over finite entries; entries where ref is -inf
// must be -inf in x too (else the error is infinite).
inline double RelativeError(const std::vector<float>& x, const std::vector<double>& ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i])) {
      if (x[i] != ref[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    if (!std::isfinite(x[i])) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, std::abs(double(x[i]) - ref[i]));
    norm = std::max(norm, std::abs(ref[i]));
  }
  return norm == 0 ? diff : diff / norm;
}

}  // namespace weft::kernels::testing
