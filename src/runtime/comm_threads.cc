// The in-process backend. Every device takes part in every collective (SPMD),
// so one cluster-wide rendezvous per call suffices:
//   1. each device posts a pointer to its call, then all meet (barrier 1);
//   2. each checks that all calls match, then moves its share of the data
//      by reading the other members' posted inputs (and, for all-reduce and
//      all-gather, writing their outputs), then all meet again (barrier 2),
//      after which no device touches another's buffers.
// Reductions go through ReduceBuffers in group-member order, as in the MPI
// backend, so both give the same bits.
#include "weft/runtime/comm_threads.h"

#include <fmt/format.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "reduce.h"

namespace weft::runtime {

namespace {

// Unwinds a device thread after another device failed. Not a std::exception,
// so a device program's catch (const std::exception&) does not swallow it.
struct ClusterAborted {};

class ThreadCommunicator;

}  // namespace

struct LocalCluster::Shared {
  explicit Shared(int64_t num_devices);

  // Barrier over all devices; throws ClusterAborted after a failure elsewhere
  // and weft::Error when a device has returned and can never arrive.
  void Arrive(int64_t device, const CollectiveCall& call);
  // Keeps the first error and releases every waiting device.
  void RecordError(const std::string& message);
  void MarkFinished(int64_t device);
  void Reset();

  const int64_t n;
  std::vector<const CollectiveCall*> posts;
  std::vector<std::unique_ptr<ThreadCommunicator>> comms;

  std::mutex mu;
  std::condition_variable cv;
  int64_t arrived = 0;
  uint64_t generation = 0;
  bool aborted = false;
  std::vector<int64_t> finished;
  std::string first_error;
};

namespace {

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(LocalCluster::Shared& shared, int64_t device)
      : shared_(shared), device_(device) {}

  int64_t device_id() const override { return device_; }
  int64_t num_devices() const override { return shared_.n; }
  std::string_view backend() const override { return "threads"; }
  // Each Run is a new program: calls are numbered from 1 again.
  void StartRun() { RestartSequence(); }

 protected:
  void DoCollective(const CollectiveCall& call) override {
    shared_.posts[device_] = &call;
    shared_.Arrive(device_, call);
    // Every device evaluates the same condition on the same posts, so either
    // all move data or all fail; the message is built before barrier 2 while
    // every post is still alive.
    const std::string mismatch = CheckSameCall();
    const bool staged = mismatch.empty() && StagesOutput(call);
    if (mismatch.empty()) Move(call, staged ? Scratch(call.out_bytes) : call.out);
    shared_.Arrive(device_, call);
    WEFT_CHECK(mismatch.empty(), "{}", mismatch);
    if (staged) std::memcpy(call.out, scratch_.data(), call.out_bytes);
  }

 private:
  // In place, all-to-all and permute would overwrite an input another device
  // still reads; they write to scratch and copy after barrier 2.
  static bool StagesOutput(const CollectiveCall& call) {
    return call.in == call.out && call.in_bytes > 0 &&
           (call.kind == CollectiveKind::kAllToAll ||
            call.kind == CollectiveKind::kCollectivePermute);
  }

  std::byte* Scratch(int64_t bytes) {
    if (static_cast<int64_t>(scratch_.size()) < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }

  std::string CheckSameCall() const {
    const CollectiveCall& first = *shared_.posts[0];
    for (int64_t d = 1; d < shared_.n; ++d) {
      const CollectiveCall& other = *shared_.posts[d];
      if (other.fingerprint == first.fingerprint && other.sequence == first.sequence) continue;
      return fmt::format(
          "devices run different collectives: device 0 runs {} but device {} runs {}; every "
          "device must run the same collectives in the same order with the same shapes",
          first.Describe(), d, other.Describe());
    }
    return "";
  }

  const CollectiveCall& Post(int64_t device) const { return *shared_.posts[device]; }

  void Move(const CollectiveCall& call, std::byte* out) {
    const std::vector<int64_t>& members = call.members();
    const int64_t n = call.group_size(), p = call.position;
    const int64_t esize = DataTypeSize(call.dtype);
    switch (call.kind) {
      case CollectiveKind::kAllReduce: {
        // This device reduces element chunk p and writes it to every member.
        const int64_t count = call.in_bytes / esize;
        const int64_t begin = count * p / n, end = count * (p + 1) / n;
        if (end == begin) return;
        std::vector<const std::byte*> inputs(n);
        for (int64_t m = 0; m < n; ++m) inputs[m] = Post(members[m]).in + begin * esize;
        std::byte* mine = out + begin * esize;
        ReduceBuffers(call.dtype, call.op, inputs.data(), n, mine, end - begin);
        for (int64_t m = 0; m < n; ++m) {
          if (m != p)
            std::memcpy(Post(members[m]).out + begin * esize, mine, (end - begin) * esize);
        }
        return;
      }
      case CollectiveKind::kAllGather:
      case CollectiveKind::kVerifyHash:
        for (int64_t m = 0; m < n; ++m) {
          std::byte* dst = m == p ? out : Post(members[m]).out;
          if (call.in_bytes > 0) std::memcpy(dst + p * call.in_bytes, call.in, call.in_bytes);
        }
        return;
      case CollectiveKind::kReduceScatter: {
        const int64_t shard = call.out_bytes;
        if (shard == 0) return;
        std::vector<const std::byte*> inputs(n);
        for (int64_t m = 0; m < n; ++m) inputs[m] = Post(members[m]).in + p * shard;
        ReduceBuffers(call.dtype, call.op, inputs.data(), n, out, shard / esize);
        return;
      }
      case CollectiveKind::kAllToAll: {
        const int64_t chunk = call.in_bytes / n;
        if (chunk == 0) return;
        for (int64_t m = 0; m < n; ++m)
          std::memcpy(out + m * chunk, Post(members[m]).in + p * chunk, chunk);
        return;
      }
      case CollectiveKind::kCollectivePermute: {
        if (call.in_bytes == 0) return;
        for (const auto& pair : call.pairs) {
          if (pair.target != device_) continue;
          std::memcpy(out, Post(pair.source).in, call.in_bytes);
          return;
        }
        std::memset(out, 0, call.in_bytes);
        return;
      }
      case CollectiveKind::kBarrier:
        return;
    }
  }

  LocalCluster::Shared& shared_;
  const int64_t device_;
  std::vector<std::byte> scratch_;
};

}  // namespace

LocalCluster::Shared::Shared(int64_t num_devices) : n(num_devices), posts(num_devices) {}

void LocalCluster::Shared::Arrive(int64_t device, const CollectiveCall& call) {
  std::unique_lock<std::mutex> lock(mu);
  if (aborted) throw ClusterAborted{};
  auto never_arrives = [&] {
    Fail(
        "device {} returned from its program while device {} waits in {}; every device must "
        "run the same collectives in the same order",
        finished.front(), device, call.Describe());
  };
  if (!finished.empty()) never_arrives();
  const uint64_t my_generation = generation;
  if (++arrived == n) {
    arrived = 0;
    ++generation;
    cv.notify_all();
    return;
  }
  cv.wait(lock, [&] { return generation != my_generation || aborted || !finished.empty(); });
  if (generation != my_generation) return;
  if (aborted) throw ClusterAborted{};
  never_arrives();
}

void LocalCluster::Shared::RecordError(const std::string& message) {
  std::lock_guard<std::mutex> lock(mu);
  if (!aborted) first_error = message;
  aborted = true;
  cv.notify_all();
}

void LocalCluster::Shared::MarkFinished(int64_t device) {
  std::lock_guard<std::mutex> lock(mu);
  finished.push_back(device);
  cv.notify_all();
}

void LocalCluster::Shared::Reset() {
  std::lock_guard<std::mutex> lock(mu);
  arrived = 0;
  aborted = false;
  finished.clear();
  first_error.clear();
  for (auto& post : posts) post = nullptr;
  for (auto& comm : comms) comm->StartRun();
}

LocalCluster::LocalCluster(int64_t num_devices) {
  WEFT_CHECK(num_devices >= 1 && num_devices <= 4096,
             "LocalCluster: {} devices requested; use 1..4096", num_devices);
  shared_ = std::make_unique<Shared>(num_devices);
  for (int64_t d = 0; d < num_devices; ++d)
    shared_->comms.push_back(std::make_unique<ThreadCommunicator>(*shared_, d));
}

LocalCluster::LocalCluster(const Topology& topology) : LocalCluster(topology.num_devices()) {}

LocalCluster::~LocalCluster() = default;

int64_t LocalCluster::num_devices() const { return shared_->n; }

Communicator& LocalCluster::communicator(int64_t device) {
  WEFT_CHECK(device >= 0 && device < shared_->n, "LocalCluster: device {} is out of range 0..{}",
             device, shared_->n - 1);
  return *shared_->comms[device];
}

void LocalCluster::Run(const DeviceFn& fn) {
  Shared& s = *shared_;
  s.Reset();
  auto device_main = [&s, &fn](int64_t d) {
    try {
      fn(d, *s.comms[d]);
      s.MarkFinished(d);
    } catch (const ClusterAborted&) {
      // Another device failed first; its error is the one reported.
    } catch (const std::exception& e) {
      s.RecordError(fmt::format("device {}: {}", d, e.what()));
    } catch (...) {
      s.RecordError(fmt::format("device {}: unknown exception", d));
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(s.n);
  try {
    for (int64_t d = 0; d < s.n; ++d) threads.emplace_back(device_main, d);
  } catch (const std::exception& e) {
    s.RecordError(fmt::format("LocalCluster: could not start device thread {}: {}", threads.size(),
                              e.what()));
  }
  for (auto& t : threads) t.join();
  if (s.aborted) throw Error(s.first_error);
}

}  // namespace weft::runtime
