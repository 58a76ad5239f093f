#include "bench_propagate.h"

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "timer.h"
#include "weft/base/error.h"
#include "weft/hlo/builder.h"
#include "weft/sharding/hlo_sharding.h"
#include "weft/spmd/sharding_propagation.h"
#include "weft/spmd/spmd_partitioner.h"

namespace weft::bench {
namespace {

constexpr PrimitiveType kF32 = PrimitiveType::kF32;

// Builds one training step: embedding gather, per layer RMSNorm + RoPE +
// attention (weft.flex_attention with segment ids) + SwiGLU MLP, a loss, the
// backward of all of it (transposed dots, attention backward), and an SGD
// update of every weight. Only parameters carry shardings.
class GraphBuilder {
 public:
  GraphBuilder(const PropagateBenchGraph& g, HloModule* module)
      : g_(g), b_("train_step"), module_(module) {
    add_ = module->AddComputation(MakeScalarReduction("add", HloOpcode::kAdd, kF32));
    const int64_t n = g.fsdp * g.tensor;
    // Mesh (fsdp, tensor): weights [in, out] split (fsdp, tensor); [out, in] the transpose.
    w_in_out_ = HloSharding::Tile(TileAssignment::Iota({g.fsdp, g.tensor}));
    w_out_in_ =
        HloSharding::Tile(TileAssignment::Iota({g.tensor, g.fsdp}, {g.fsdp, g.tensor}, {1, 0}));
    batch_ = HloSharding::PartialTile(TileAssignment::Iota({g.fsdp, 1, g.tensor}));
    vec_ = HloSharding::PartialTile(TileAssignment::Iota({g.fsdp, g.tensor}));
    (void)n;
  }

  HloInstruction* Param(Shape shape, const HloSharding& s, std::string name) {
    HloInstruction* p = b_.Parameter(next_param_++, std::move(shape), std::move(name));
    p->set_sharding(s);
    return p;
  }
  HloInstruction* Scalar(double v) { return b_.ConstantScalar(kF32, v); }
  HloInstruction* Bcast(HloInstruction* x, std::vector<int64_t> dims, std::vector<int64_t> map) {
    return b_.Broadcast(x, std::move(dims), std::move(map));
  }
  // x [.., k] . w [k, n] with `batch` leading dims of x free.
  HloInstruction* Dot(HloInstruction* x, HloInstruction* w, int64_t xc, int64_t wc) {
    DotDimensionNumbers dn;
    dn.lhs_contracting_dims = {xc};
    dn.rhs_contracting_dims = {wc};
    return b_.Dot(x, w, dn);
  }
  // Weight gradient: sum over B, S of x[B,S,i] * dy[B,S,o] -> [i, o].
  HloInstruction* WeightGrad(HloInstruction* x, HloInstruction* dy) {
    DotDimensionNumbers dn;
    dn.lhs_contracting_dims = {0, 1};
    dn.rhs_contracting_dims = {0, 1};
    return b_.Dot(x, dy, dn);
  }
  HloInstruction* RowSum(HloInstruction* x) { return b_.Reduce(x, Scalar(0), {2}, add_); }

  struct NormOut {
    HloInstruction* y;
    HloInstruction* rs;
    HloInstruction* xhat;
  };
  NormOut RmsNorm(HloInstruction* x, HloInstruction* w) {
    const std::vector<int64_t> bsd = {g_.batch, g_.seq, g_.d_model};
    HloInstruction* ms = b_.Multiply(RowSum(b_.Multiply(x, x)),
                                     Bcast(Scalar(1.0 / g_.d_model), {g_.batch, g_.seq}, {}));
    HloInstruction* rs =
        b_.Unary(HloOpcode::kRsqrt, b_.Add(ms, Bcast(Scalar(1e-6), {g_.batch, g_.seq}, {})));
    HloInstruction* xhat = b_.Multiply(x, Bcast(rs, bsd, {0, 1}));
    return {b_.Multiply(xhat, Bcast(w, bsd, {2})), rs, xhat};
  }
  // d/dx of RmsNorm(x) * w given dy; accumulates dw into *dw.
  HloInstruction* RmsNormBackward(HloInstruction* dy, const NormOut& n, HloInstruction* w,
                                  HloInstruction** dw) {
    const std::vector<int64_t> bsd = {g_.batch, g_.seq, g_.d_model};
    *dw = b_.Reduce(b_.Reduce(b_.Multiply(dy, n.xhat), Scalar(0), {0}, add_), Scalar(0), {0}, add_);
    HloInstruction* dxhat = b_.Multiply(dy, Bcast(w, bsd, {2}));
    HloInstruction* dot = b_.Multiply(RowSum(b_.Multiply(dxhat, n.xhat)),
                                      Bcast(Scalar(1.0 / g_.d_model), {g_.batch, g_.seq}, {}));
    HloInstruction* corr = b_.Multiply(n.xhat, Bcast(dot, bsd, {0, 1}));
    return b_.Multiply(b_.Subtract(dxhat, corr), Bcast(n.rs, bsd, {0, 1}));
  }
  // Rotate-half RoPE on [B,S,H,Dh].
  HloInstruction* Rope(HloInstruction* x, HloInstruction* cos, HloInstruction* sin, int64_t h) {
    const int64_t dh = g_.d_model / g_.heads, half = dh / 2;
    const std::vector<int64_t> shape = {g_.batch, g_.seq, h, dh};
    HloInstruction* x1 = b_.Slice(x, {0, 0, 0, 0}, {g_.batch, g_.seq, h, half});
    HloInstruction* x2 = b_.Slice(x, {0, 0, 0, half}, {g_.batch, g_.seq, h, dh});
    HloInstruction* rot = b_.Concatenate({b_.Unary(HloOpcode::kNegate, x2), x1}, 3);
    return b_.Add(b_.Multiply(x, Bcast(cos, shape, {1, 3})),
                  b_.Multiply(rot, Bcast(sin, shape, {1, 3})));
  }
  // [B,S,H*Dh] <-> [B,H,S,Dh]
  HloInstruction* ToHeads(HloInstruction* x, int64_t h) {
    const int64_t dh = g_.d_model / g_.heads;
    return b_.Reshape(x, {g_.batch, g_.seq, h, dh});
  }
  HloInstruction* FromHeads(HloInstruction* x, int64_t h) {
    const int64_t dh = g_.d_model / g_.heads;
    return b_.Reshape(b_.Transpose(x, {0, 2, 1, 3}), {g_.batch, g_.seq, h * dh});
  }

  std::unique_ptr<HloComputation> Build() {
    const int64_t B = g_.batch, S = g_.seq, D = g_.d_model, F = g_.d_ff, V = g_.vocab;
    const int64_t H = g_.heads, Hkv = g_.kv_heads, Dh = D / H;
    HloInstruction* tokens = Param(Shape(PrimitiveType::kS32, {B, S}), batch_, "tokens");
    HloInstruction* seg = Param(Shape(PrimitiveType::kS32, {B, S}), batch_, "segment_ids");
    HloInstruction* embed = Param(Shape(kF32, {V, D}), w_in_out_, "embedding");
    HloInstruction* head = Param(Shape(kF32, {D, V}), w_in_out_, "lm_head");
    HloInstruction* cos = b_.Parameter(next_param_++, Shape(kF32, {S, Dh}), "rope_cos");
    HloInstruction* sin = b_.Parameter(next_param_++, Shape(kF32, {S, Dh}), "rope_sin");
    HloInstruction* lr = Scalar(1e-3);

    GatherDimensionNumbers gd;
    gd.offset_dims = {2};
    gd.collapsed_slice_dims = {0};
    gd.start_index_map = {0};
    gd.index_vector_dim = 2;
    HloInstruction* x = b_.Gather(embed, b_.Reshape(tokens, {B, S, 1}), gd, {1, D});

    struct Layer {
      HloInstruction *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *w1, *w3, *w2;
      HloInstruction *x_in, *h;
      NormOut n1, n2;
      HloInstruction *q, *k, *v, *out, *lse, *attn_flat, *a, *bb, *sig, *g, *m;
    };
    std::vector<Layer> layers(g_.layers);
    const std::string config = R"({"tensors": ["q_segment_ids", "kv_segment_ids"]})";
    for (int64_t l = 0; l < g_.layers; ++l) {
      Layer& L = layers[l];
      L.attn_norm = Param(Shape(kF32, {D}), vec_, fmt::format("l{}.attn_norm", l));
      L.wq = Param(Shape(kF32, {D, H * Dh}), w_in_out_, fmt::format("l{}.wq", l));
      L.wk = Param(Shape(kF32, {D, Hkv * Dh}), w_in_out_, fmt::format("l{}.wk", l));
      L.wv = Param(Shape(kF32, {D, Hkv * Dh}), w_in_out_, fmt::format("l{}.wv", l));
      L.wo = Param(Shape(kF32, {H * Dh, D}), w_out_in_, fmt::format("l{}.wo", l));
      L.mlp_norm = Param(Shape(kF32, {D}), vec_, fmt::format("l{}.mlp_norm", l));
      L.w1 = Param(Shape(kF32, {D, F}), w_in_out_, fmt::format("l{}.w1", l));
      L.w3 = Param(Shape(kF32, {D, F}), w_in_out_, fmt::format("l{}.w3", l));
      L.w2 = Param(Shape(kF32, {F, D}), w_out_in_, fmt::format("l{}.w2", l));
      L.x_in = x;
      L.n1 = RmsNorm(x, L.attn_norm);
      L.q = b_.Transpose(Rope(ToHeads(Dot(L.n1.y, L.wq, 2, 0), H), cos, sin, H), {0, 2, 1, 3});
      L.k = b_.Transpose(Rope(ToHeads(Dot(L.n1.y, L.wk, 2, 0), Hkv), cos, sin, Hkv), {0, 2, 1, 3});
      L.v = b_.Transpose(ToHeads(Dot(L.n1.y, L.wv, 2, 0), Hkv), {0, 2, 1, 3});
      HloInstruction* attn =
          b_.CustomCall({L.q, L.k, L.v, seg, seg},
                        Shape::Tuple({Shape(kF32, {B, H, S, Dh}), Shape(kF32, {B, H, S})}),
                        "weft.flex_attention", config);
      L.out = b_.GetTupleElement(attn, 0);
      L.lse = b_.GetTupleElement(attn, 1);
      L.attn_flat = FromHeads(L.out, H);
      L.h = b_.Add(x, Dot(L.attn_flat, L.wo, 2, 0));
      L.n2 = RmsNorm(L.h, L.mlp_norm);
      L.a = Dot(L.n2.y, L.w1, 2, 0);
      L.bb = Dot(L.n2.y, L.w3, 2, 0);
      L.sig = b_.Unary(HloOpcode::kLogistic, L.a);
      L.g = b_.Multiply(L.a, L.sig);
      L.m = b_.Multiply(L.g, L.bb);
      x = b_.Add(L.h, Dot(L.m, L.w2, 2, 0));
    }
    HloInstruction* final_norm = Param(Shape(kF32, {D}), vec_, "final_norm");
    NormOut nf = RmsNorm(x, final_norm);
    HloInstruction* logits = Dot(nf.y, head, 2, 0);
    HloInstruction* loss = b_.Reduce(logits, Scalar(0), {0, 1, 2}, add_);

    // Backward (a stand-in for the loss gradient: d loss / d logits = 1).
    std::vector<HloInstruction*> outputs = {loss};
    auto update = [&](HloInstruction* w, HloInstruction* dw) {
      std::vector<int64_t> dims = w->shape().dimensions();
      outputs.push_back(b_.Subtract(w, b_.Multiply(Bcast(lr, dims, {}), dw)));
    };
    HloInstruction* dlogits = Bcast(Scalar(1), {B, S, V}, {});
    update(head, WeightGrad(nf.y, dlogits));
    HloInstruction* dfn = nullptr;
    HloInstruction* dx = RmsNormBackward(Dot(dlogits, head, 2, 1), nf, final_norm, &dfn);
    update(final_norm, dfn);
    for (int64_t l = g_.layers - 1; l >= 0; --l) {
      Layer& L = layers[l];
      // MLP.
      HloInstruction* dm = Dot(dx, L.w2, 2, 1);
      update(L.w2, WeightGrad(L.m, dx));
      HloInstruction* dbb = b_.Multiply(dm, L.g);
      HloInstruction* dg = b_.Multiply(dm, L.bb);
      HloInstruction* one = Bcast(Scalar(1), {B, S, F}, {});
      HloInstruction* dsilu =
          b_.Multiply(L.sig, b_.Add(one, b_.Multiply(L.a, b_.Subtract(one, L.sig))));
      HloInstruction* da = b_.Multiply(dg, dsilu);
      update(L.w1, WeightGrad(L.n2.y, da));
      update(L.w3, WeightGrad(L.n2.y, dbb));
      HloInstruction* dn2 = b_.Add(Dot(da, L.w1, 2, 1), Dot(dbb, L.w3, 2, 1));
      HloInstruction* dnorm2 = nullptr;
      HloInstruction* dh = b_.Add(dx, RmsNormBackward(dn2, L.n2, L.mlp_norm, &dnorm2));
      update(L.mlp_norm, dnorm2);
      // Attention.
      update(L.wo, WeightGrad(L.attn_flat, dh));
      HloInstruction* dout = b_.Transpose(ToHeads(Dot(dh, L.wo, 2, 1), H), {0, 2, 1, 3});
      HloInstruction* grads =
          b_.CustomCall({L.q, L.k, L.v, L.out, L.lse, dout, seg, seg},
                        Shape::Tuple({L.q->shape(), L.k->shape(), L.v->shape()}),
                        "weft.flex_attention_backward", config);
      auto back = [&](int64_t i, int64_t h, bool rope) {
        HloInstruction* d = b_.Transpose(b_.GetTupleElement(grads, i), {0, 2, 1, 3});
        if (rope) d = Rope(d, cos, sin, h);  // the transpose of a rotation, up to sign
        return b_.Reshape(d, {B, S, h * Dh});
      };
      HloInstruction* dq = back(0, H, true);
      HloInstruction* dk = back(1, Hkv, true);
      HloInstruction* dv = back(2, Hkv, false);
      update(L.wq, WeightGrad(L.n1.y, dq));
      update(L.wk, WeightGrad(L.n1.y, dk));
      update(L.wv, WeightGrad(L.n1.y, dv));
      HloInstruction* dn1 =
          b_.Add(b_.Add(Dot(dq, L.wq, 2, 1), Dot(dk, L.wk, 2, 1)), Dot(dv, L.wv, 2, 1));
      HloInstruction* dnorm1 = nullptr;
      dx = b_.Add(dh, RmsNormBackward(dn1, L.n1, L.attn_norm, &dnorm1));
      update(L.attn_norm, dnorm1);
    }
    // Embedding gradient: tokens one-hot (as a compare against iota) . dx.
    HloInstruction* onehot = b_.Convert(
        b_.Compare(Bcast(tokens, {B, S, V}, {0, 1}),
                   b_.Iota(Shape(PrimitiveType::kS32, {B, S, V}), 2), ComparisonDirection::kEq),
        kF32);
    update(embed, WeightGrad(onehot, dx));
    return b_.Build(b_.Tuple(outputs));
  }

 private:
  const PropagateBenchGraph& g_;
  HloComputationBuilder b_;
  HloModule* module_;
  HloComputation* add_ = nullptr;
  int64_t next_param_ = 0;
  HloSharding w_in_out_, w_out_in_, batch_, vec_;
};

}  // namespace

std::unique_ptr<HloModule> BuildLlamaTrainingGraph(const PropagateBenchGraph& graph) {
  auto module = std::make_unique<HloModule>("llama_train_step");
  module->set_num_partitions(graph.fsdp * graph.tensor);
  GraphBuilder builder(graph, module.get());
  module->AddEntryComputation(builder.Build());
  return module;
}

int RunPropagateBench(bool json) {
  PropagateBenchGraph graph;
  double build_seconds = 0, propagate_seconds = 0;
  int64_t instructions = 0, rounds = 0, sharded = 0;
  const double t0 = NowSeconds();
  std::unique_ptr<HloModule> module = BuildLlamaTrainingGraph(graph);
  build_seconds = NowSeconds() - t0;
  for (const HloComputation* c : module->computations()) instructions += c->instruction_count();
  const double t1 = NowSeconds();
  PropagationResult result = PropagateShardings(*module);
  propagate_seconds = NowSeconds() - t1;
  rounds = result.rounds;
  for (const HloComputation* c : module->computations()) {
    for (const HloInstruction* i : c->instructions()) sharded += i->has_sharding();
  }
  if (json) {
    std::printf(
        "{\"bench\": \"propagate\", \"layers\": %lld, \"devices\": %lld, \"instructions\": %lld, "
        "\"sharded\": %lld, \"rounds\": %lld, \"build_seconds\": %.3f, \"propagate_seconds\": "
        "%.3f}\n",
        static_cast<long long>(graph.layers), static_cast<long long>(graph.fsdp * graph.tensor),
        static_cast<long long>(instructions), static_cast<long long>(sharded),
        static_cast<long long>(rounds), build_seconds, propagate_seconds);
  } else {
    std::printf(
        "sharding propagation: %lld-layer Llama training step on %lld devices (fsdp %lld x tensor "
        "%lld), one thread\n",
        static_cast<long long>(graph.layers), static_cast<long long>(graph.fsdp * graph.tensor),
        static_cast<long long>(graph.fsdp), static_cast<long long>(graph.tensor));
    std::printf("  %-14s %12lld\n", "instructions", static_cast<long long>(instructions));
    std::printf("  %-14s %12lld\n", "sharded", static_cast<long long>(sharded));
    std::printf("  %-14s %12lld\n", "rounds", static_cast<long long>(rounds));
    std::printf("  %-14s %12.3f s\n", "build", build_seconds);
    std::printf("  %-14s %12.3f s   (target < 5 s)\n", "propagate", propagate_seconds);
  }
  return 0;
}

std::unique_ptr<HloModule> BuildShardedChain(int64_t n) {
  auto module = std::make_unique<HloModule>("sharded_chain");
  module->set_num_partitions(4);
  HloComputationBuilder b("main");
  HloInstruction* p = b.Parameter(0, Shape(kF32, {64, 32}), "p");
  p->set_sharding(HloSharding::Tile(TileAssignment::Iota({4, 1})));
  const HloOpcode ops[] = {HloOpcode::kAdd, HloOpcode::kMultiply, HloOpcode::kSubtract,
                           HloOpcode::kMaximum};
  HloInstruction* x = p;
  for (int64_t i = 0; i < n; ++i) x = b.Binary(ops[i % 4], x, p);
  module->AddEntryComputation(b.Build(x));
  return module;
}

int RunPropagateChainBench(int64_t n, bool json) {
  WEFT_CHECK(n >= 4 && n <= 10'000'000, "--chain {}: give a chain of 4 to 10000000 instructions",
             n);
  struct Point {
    int64_t n = 0;
    double build = 0, propagate = 0, partition = 0, destroy = 0;
  };
  std::vector<Point> points;
  for (int64_t size : {n / 4, n / 2, n}) {
    Point pt;
    pt.n = size;
    double t = NowSeconds();
    std::unique_ptr<HloModule> module = BuildShardedChain(size);
    pt.build = NowSeconds() - t;
    t = NowSeconds();
    PropagateShardings(*module);
    pt.propagate = NowSeconds() - t;
    t = NowSeconds();
    std::unique_ptr<HloModule> partitioned = PartitionModule(*module, {});
    pt.partition = NowSeconds() - t;
    t = NowSeconds();
    partitioned.reset();
    module.reset();
    pt.destroy = NowSeconds() - t;
    points.push_back(pt);
  }
  auto us = [](double seconds, int64_t size) { return seconds * 1e6 / static_cast<double>(size); };
  const Point& small = points.front();
  const Point& large = points.back();
  auto ratio = [&](double Point::*pass) {
    return us(large.*pass, large.n) / us(small.*pass, small.n);
  };
  if (json) {
    std::printf("{\"bench\": \"propagate_chain\", \"points\": [");
    for (size_t i = 0; i < points.size(); ++i) {
      const Point& pt = points[i];
      std::printf(
          "%s{\"instructions\": %lld, \"build_us\": %.3f, \"propagate_us\": %.3f, "
          "\"partition_us\": %.3f, \"destroy_us\": %.3f}",
          i ? ", " : "", static_cast<long long>(pt.n), us(pt.build, pt.n), us(pt.propagate, pt.n),
          us(pt.partition, pt.n), us(pt.destroy, pt.n));
    }
    std::printf(
        "], \"ratio_build\": %.2f, \"ratio_propagate\": %.2f, \"ratio_partition\": %.2f, "
        "\"ratio_destroy\": %.2f}\n",
        ratio(&Point::build), ratio(&Point::propagate), ratio(&Point::partition),
        ratio(&Point::destroy));
    return 0;
  }
  std::printf(
      "sharded chain: a parameter split over 4 devices and n elementwise ops that each read it "
      "(it has n users), one thread; microseconds per instruction\n");
  std::printf("  %12s %10s %10s %10s %10s\n", "instructions", "build", "propagate", "partition",
              "destroy");
  for (const Point& pt : points) {
    std::printf("  %12lld %10.3f %10.3f %10.3f %10.3f\n", static_cast<long long>(pt.n),
                us(pt.build, pt.n), us(pt.propagate, pt.n), us(pt.partition, pt.n),
                us(pt.destroy, pt.n));
  }
  std::printf(
      "  %12s %10.2f %10.2f %10.2f %10.2f   (per instruction at %lld / at %lld: 1 is "
      "linear, 4 quadratic)\n",
      "ratio", ratio(&Point::build), ratio(&Point::propagate), ratio(&Point::partition),
      ratio(&Point::destroy), static_cast<long long>(large.n), static_cast<long long>(small.n));
  return 0;
}

}  // namespace weft::bench
