// The in-process backend. Every device takes part in every collective (SPMD),
// and the devices of each replica group meet on their own (a Meeting), so
// one rendezvous of the group per call suffices:
//   1. each device posts a pointer to its call, then the group's members
//      meet (barrier 1); the last to arrive checks that their calls match;
//   2. a small collective: that device has moved every member's data before
//      releasing the others, and all are done. A larger one: each member
//      moves its share by reading the other members' posted inputs (and,
//      for all-reduce and all-gather, writing their outputs), then they
//      meet again (barrier 2), after which no device touches another's
//      buffers.
// A group never waits for another: with device d on thread d % threads,
// tiny's FSDP groups {0,2} and {1,3} each meet on one thread. Groups that
// never meet are still checked against each other: the last member of a
// group compares its calls with those that the first group to pass the same
// collective numbers ran (a short history, Shared::passed). A batch whose
// calls have different groups meets as all devices.
// An all-to-all that every member runs in place (the executor's buffer
// assignment puts it over its dying operand) moves no chunk to scratch: each
// pair of members swaps the chunks they send each other where they lie,
// each member half of them.
// Reductions go through ReduceBuffers in group-member order, as in the MPI
// backend, so both give the same bits.
// A device waits at a barrier at most the collective timeout; then the run
// fails naming the members that did not arrive (the watchdog). Members
// arrive by counting themselves atomically; only the last to arrive takes
// the cluster's mutex, to release the others.
// Each device runs on a fiber, on one of LocalCluster::threads() threads
// (no more than the cores). A waiting device yields its thread to the
// thread's other devices; a thread whose devices all wait spins for a few
// tens of microseconds, then sleeps on a futex that the last to arrive (or a
// failure) bumps. So four devices on two cores take turns at collectives:
// the kernel neither preempts one device for another in the middle of its
// work nor wakes a sleeping thread at every collective (tiny's 2 x 2 mesh:
// ~600 context switches a step with a thread per device, ~40 with fibers).
// Before it spins, a thread whose devices all wait runs a device of another
// thread that could go on while that thread runs its other device (or lost
// its core to the host): a device is held by one thread at a time, and goes
// back to its own thread's round after that run.
// A small collective (kMoveAllBytes) is moved whole by the last device to
// arrive, so it needs one barrier, not two (four devices on two cores: a
// 4 KiB all-gather in ~2 us). A batch (Communicator::BeginBatch: a variadic
// collective's operands) is posted and moved as one call is, so its members
// meet once or twice for all of it.
#include "weft/runtime/comm_threads.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <thread>

#include "reduce.h"
#include "weft/base/copy_bytes.h"
#include "weft/base/fiber.h"
#include "weft/base/thread_pool.h"
#include "weft/runtime/config.h"

namespace weft::runtime {

namespace {

// Unwinds a device thread after another device failed. Not a std::exception,
// so a device program's catch (const std::exception&) does not swallow it.
struct ClusterAborted {};

// Sleeps while `word` holds `expected`, at most `timeout` (none: no limit).
// Returns early on a wake-up, a signal or a changed word; callers re-check.
void FutexWait(std::atomic<uint32_t>& word, uint32_t expected,
               std::optional<std::chrono::nanoseconds> timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  timespec ts{};
  if (timeout) {
    ts.tv_sec = static_cast<time_t>(timeout->count() / 1000000000);
    ts.tv_nsec = static_cast<long>(timeout->count() % 1000000000);
  }
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected,
          timeout ? &ts : nullptr, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
          nullptr, 0);
}

class ThreadCommunicator;

// A thread that runs devices' fibers (LocalCluster::Run): a waiting device
// notes its deadline and yields; a round of resumes in which no device got
// further sends the thread to run another thread's device, or to wait for
// the next release.
struct Worker {
  uint64_t progress = 0;  // bumped by every device that arrives at a barrier
  std::chrono::steady_clock::time_point deadline;  // the earliest watchdog
  // Nanoseconds this thread ran fibers: what a device that yielded here
  // waited while others ran (CollectiveStats::seconds_others_ran), read by
  // that device wherever it resumes.
  std::atomic<int64_t> ran_ns{0};
  std::atomic<int64_t> running{-1};  // the device it runs now, or -1
  // Whether it goes through its devices (false while it spins or sleeps
  // because all of them wait, and once it ends): while it does, a device of
  // its that does not wait waits for the thread's other device to yield.
  std::atomic<bool> active{false};
};

thread_local Worker* t_worker = nullptr;

// The worker of the thread running the calling fiber. A device's fiber may
// resume on another thread than the one it yielded on, so code that yields
// reads thread-local state afresh after every yield, through a call the
// compiler can neither inline nor prove free of side effects (an inlined
// read could reuse the thread-local base computed before the yield, and a
// call known to be `const` the value: std::this_thread::get_id() is one).
#if defined(__clang__)
#define WEFT_OPAQUE_CALL [[clang::noinline]]
#else
#define WEFT_OPAQUE_CALL [[gnu::noipa]]
#endif
WEFT_OPAQUE_CALL Worker* CurrentWorker() { return t_worker; }

// How long a thread whose devices all wait spins before it sleeps: tiny's
// 2 x 2 mesh on two cores ran as fast with 50, 200 and 1000 us, and 2-4%
// slower without spinning (docs/PERFORMANCE.md).
constexpr std::chrono::microseconds kSpin{50};

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

struct LocalCluster::Shared {
  explicit Shared(int64_t num_devices);

  // The devices that meet at a collective: the members of its replica group
  // (for a batch whose calls' groups differ, every device). Each group meets
  // on its own, so the devices of one group never wait for another group's.
  struct Meeting {
    explicit Meeting(std::vector<int64_t> devices) : members(std::move(devices)) {}
    const std::vector<int64_t> members;
    std::atomic<int64_t> arrived{0};  // members at the current barrier
    // Barriers released so far; a waiting member yields (and its thread
    // eventually sleeps on the futex `wake`) until this changes or the run
    // stops.
    std::atomic<uint64_t> released_generation{0};
    // Set at barrier 1 by its last member: whether the posted calls differ
    // (the message), and whether that member already moved every member's
    // data (a small collective), so that no barrier 2 is needed.
    std::string mismatch;
    bool moved_all = false;
  };
  // The meeting of `members`, created on first use; it lives as long as the
  // cluster.
  Meeting& MeetingOf(const std::vector<int64_t>& members);

  // Barrier over the meeting's members; throws ClusterAborted after a
  // failure elsewhere and weft::Error when a device has returned and can
  // never arrive. With `watchdog`, a device that waits longer than the
  // timeout fails the run (the error names the members that did not
  // arrive). Barrier 2 has no watchdog: a member between the barriers only
  // moves data, and the others may still read its buffers.
  // `last`, when given, runs on the last member to arrive (holding `mu`),
  // before it releases the others.
  void Arrive(Meeting& meeting, int64_t device, const CollectiveCall& call, bool watchdog,
              const std::function<void()>& last = {});
  // A group that meets alone is not compared with the other groups at its
  // barrier; instead its last member compares each call with the call that
  // the first group to pass the same sequence number ran (a short history).
  // The message, or "" (call with `mu` held).
  std::string CheckAgainstOtherGroups(std::span<const CollectiveCall> calls, int64_t device);
  // Keeps the first error and its kind and releases every waiting device.
  void RecordError(const std::string& message, bool internal);
  void MarkFinished(int64_t device);
  // The device's thread is about to return.
  void MarkExited(int64_t device);
  void Reset(std::chrono::milliseconds collective_timeout);
  // Bumps `wake`: the threads whose devices all wait look again.
  void WakeThreads();
  // WakeThreads, and the devices in Arrive's slow path (call with `mu` held).
  void WakeSleepers();

  const int64_t n;
  const std::vector<int64_t> everyone;                 // 0..n-1
  std::vector<std::span<const CollectiveCall>> posts;  // each device's batch
  std::vector<std::unique_ptr<ThreadCommunicator>> comms;

  std::mutex meetings_mu;  // guards `meetings` (looked up once per group and device)
  std::map<std::vector<int64_t>, std::unique_ptr<Meeting>> meetings;

  // Guards the failure state (aborted, finished, first_error, ...), the
  // history of calls, a barrier's release and its slow path; arriving takes
  // no lock.
  std::mutex mu;
  std::condition_variable barrier_cv;  // devices in Arrive's slow path
  std::condition_variable exit_cv;     // Run, waiting for the device threads
  // Whether the run stopped (aborted, or a device returned; written under
  // `mu`). Every release and every stop bumps `wake`.
  std::atomic<bool> stopped{false};
  std::atomic<uint32_t> wake{0};
  // Threads asleep on `wake` (or about to be): a release with none asleep
  // makes no system call. Read after bumping `wake`, and bumped before a
  // thread sleeps, both sequentially consistent, so a thread that the
  // releaser does not count sees the new `wake` and does not sleep.
  std::atomic<int32_t> sleepers{0};
  bool aborted = false;
  bool error_is_internal = false;
  std::vector<int64_t> finished;
  std::string first_error;
  std::chrono::milliseconds timeout{0};
  // When the watchdog fired (the run then waits a grace for missing threads).
  std::optional<std::chrono::steady_clock::time_point> timed_out_at;
  // Per device, for the watchdog's message: whether it waits at a barrier,
  // and the last collective it entered (0: none).
  std::vector<std::atomic<char>> at_barrier;
  std::vector<std::atomic<int64_t>> last_sequence;
  std::vector<char> exited;  // per device: its fiber has returned (or never ran)
  // Per device, kept across runs (a thread's stack would be faulted in
  // again at every run).
  std::vector<std::unique_ptr<Fiber::Stack>> stacks;
  // Per device, during a Run: its fiber; whether a thread holds it (the one
  // running or about to run it; taken by compare-and-swap, so one thread at
  // a time); whether its own thread resumed it once (only then may another
  // thread run it: its first run sets the thread's pool share,
  // ThreadPool::SetThreadsForThisThread); and how long its last run took.
  struct DeviceFiber {
    std::unique_ptr<Fiber> fiber;
    std::atomic<bool> held{false};
    std::atomic<bool> started{false};
    std::atomic<int64_t> last_run_ns{0};
  };
  std::vector<DeviceFiber> fibers;
  // Per thread of the current Run (a device that yielded on a thread reads
  // its `ran_ns` wherever it resumes, perhaps after that thread ended).
  std::vector<std::unique_ptr<Worker>> workers;
  // The calls that groups meeting alone passed, at sequence % size
  // (CheckAgainstOtherGroups).
  struct Passed {
    int64_t sequence = 0;  // 0: none
    uint64_t fingerprint = 0;
    int64_t device = 0;  // the first member of the group that passed it
  };
  std::array<Passed, 256> passed;

 private:
  std::string TimeoutMessage(const Meeting& meeting, const CollectiveCall& call) const;
};

namespace {

class ThreadCommunicator final : public Communicator {
  using Meeting = LocalCluster::Shared::Meeting;

 public:
  ThreadCommunicator(LocalCluster::Shared& shared, int64_t device)
      : shared_(shared), device_(device) {}

  int64_t device_id() const override { return device_; }
  int64_t num_devices() const override { return shared_.n; }
  std::string_view backend() const override { return "threads"; }
  // Each Run is a new program: calls are numbered from 1 again.
  void StartRun() { RestartSequence(); }
  void NoteOthersRan(std::chrono::steady_clock::duration d) {
    AddSecondsOthersRan(std::chrono::duration<double>(d).count());
  }

 protected:
  // Chunks along a dimension that is not leading are moved where they lie:
  // no packing before the exchange or unpacking after it.
  bool MovesStridedChunks() const override { return true; }

  void DoCollective(const CollectiveCall& call) override { DoCollectives({&call, 1}); }

  // A batch (Communicator::BeginBatch) meets as one call does: once when
  // small, twice otherwise.
  void DoCollectives(std::span<const CollectiveCall> calls) override {
    Meeting& meeting = MeetingFor(calls);
    shared_.posts[device_] = calls;
    // The last member to arrive checks the calls and, for a small batch,
    // moves the data of every member: then all are done when released. A
    // larger one is moved by all members in parallel, each its own share,
    // between barriers 1 and 2. Both run the same Move, so the bits are the
    // same.
    shared_.Arrive(meeting, device_, calls.front(), /*watchdog=*/true,
                   [this, &meeting] { CheckAndMoveSmall(meeting); });
    // Read before barrier 2 (or the meeting's next barrier 1), the only
    // places where they change.
    const std::string mismatch = meeting.mismatch;
    if (!meeting.moved_all) {
      if (mismatch.empty()) MoveBatch(calls);
      shared_.Arrive(meeting, device_, calls.front(), /*watchdog=*/false);
    }
    WEFT_CHECK(mismatch.empty(), "{}", mismatch);
    // What MoveBatch staged (it read the other members' posts, which may
    // already hold their next calls now).
    int64_t staged = 0;
    for (size_t i = 0; i < calls.size(); ++i) {
      if (!staged_[i]) continue;
      std::memcpy(calls[i].out, scratch_.data() + staged, calls[i].out_bytes);
      staged += calls[i].out_bytes;
    }
  }

 private:
  // An all-to-all that every member of its group runs in place (the
  // executor's buffer assignment put each result where its dying operand
  // was): each pair of members swaps the chunks they send each other where
  // they lie, so nothing is staged and half the bytes move.
  bool SwapsInPlace(const CollectiveCall& call, size_t index) const {
    if (call.kind != CollectiveKind::kAllToAll || call.in != call.out) return false;
    for (int64_t m : call.members()) {
      const CollectiveCall& other = Post(m, index);
      if (other.in != other.out) return false;
    }
    return true;
  }

  // In place otherwise, all-to-all and permute would overwrite an input
  // another device still reads; they write to scratch and copy after the
  // last barrier.
  bool StagesOutput(const CollectiveCall& call, size_t index) const {
    return call.in == call.out && call.in_bytes > 0 &&
           (call.kind == CollectiveKind::kCollectivePermute ||
            (call.kind == CollectiveKind::kAllToAll && !SwapsInPlace(call, index)));
  }

  // Moves this device's share of each call of its batch (or, on the last
  // device to arrive, a small batch's whole data): into the call's output,
  // or into its place in scratch_ (staged outputs one after the other,
  // marked in staged_).
  void MoveBatch(std::span<const CollectiveCall> calls) {
    staged_.assign(calls.size(), 0);
    int64_t bytes = 0;
    for (size_t i = 0; i < calls.size(); ++i) {
      staged_[i] = StagesOutput(calls[i], i);
      if (staged_[i]) bytes += calls[i].out_bytes;
    }
    if (static_cast<int64_t>(scratch_.size()) < bytes) scratch_.resize(bytes);
    int64_t staged = 0;
    for (size_t i = 0; i < calls.size(); ++i) {
      const CollectiveCall& call = calls[i];
      if (staged_[i]) {
        Move(call, i, scratch_.data() + staged);
        staged += call.out_bytes;
      } else {
        Move(call, i, call.out);
      }
    }
  }

  // At most this many bytes read and written over all devices: one thread
  // moves them in less time than the devices take to meet once more. With
  // devices on fibers, meeting again costs a few fiber switches, so the
  // bound is low: four devices on two cores moved a 16-64 KiB all-reduce or
  // reduce-scatter 1.6-2.4x faster in parallel than the last device alone
  // did, and the last device alone is still faster at 1-4 KiB (`weft bench
  // collectives`, docs/PERFORMANCE.md).
  static constexpr int64_t kMoveAllBytes = int64_t{32} << 10;

  // Every call of a batch has the same groups (a partition of the devices),
  // so the members of this device's group meet; otherwise every device
  // does. Each device decides alike, from the calls alone.
  Meeting& MeetingFor(std::span<const CollectiveCall> calls) {
    const CollectiveCall& first = calls.front();
    bool same_groups = true;
    for (const CollectiveCall& call : calls.subspan(1))
      same_groups = same_groups && *call.groups == *first.groups;
    const std::vector<int64_t>& members = same_groups ? first.members() : shared_.everyone;
    for (Meeting* meeting : meetings_) {
      if (meeting->members == members) return *meeting;
    }
    meetings_.push_back(&shared_.MeetingOf(members));
    return *meetings_.back();
  }

  void CheckAndMoveSmall(Meeting& meeting) {
    meeting.mismatch = CheckSameCalls(meeting);
    if (meeting.mismatch.empty() && meeting.members.size() < static_cast<size_t>(shared_.n))
      meeting.mismatch = shared_.CheckAgainstOtherGroups(shared_.posts[device_], device_);
    int64_t bytes = 0;
    for (int64_t d : meeting.members) {
      for (const CollectiveCall& call : shared_.posts[d]) bytes += call.in_bytes + call.out_bytes;
    }
    meeting.moved_all = meeting.mismatch.empty() && bytes <= kMoveAllBytes;
    if (!meeting.moved_all) return;
    for (int64_t d : meeting.members) shared_.comms[d]->MoveBatch(shared_.posts[d]);
  }

  std::string CheckSameCalls(const Meeting& meeting) const {
    const int64_t d0 = meeting.members.front();
    const std::span<const CollectiveCall> first = shared_.posts[d0];
    for (int64_t d : meeting.members) {
      const std::span<const CollectiveCall> other = shared_.posts[d];
      const size_t common = std::min(first.size(), other.size());
      for (size_t i = 0; i <= common; ++i) {
        if (i == common) {
          if (first.size() == other.size()) break;
          return fmt::format(
              "devices run different collectives: device {} runs a batch of {} ({} first) but "
              "device {} runs a batch of {} ({} first); every device must run the same "
              "collectives in the same order with the same shapes",
              d0, first.size(), first.front().Describe(), d, other.size(),
              other.front().Describe());
        }
        if (other[i].fingerprint == first[i].fingerprint &&
            other[i].sequence == first[i].sequence) {
          continue;
        }
        return fmt::format(
            "devices run different collectives: device {} runs {} but device {} runs {}; every "
            "device must run the same collectives in the same order with the same shapes",
            d0, first[i].Describe(), d, other[i].Describe());
      }
    }
    return "";
  }

  // The call of device `device` that sits where this device's call `index`
  // sits in the batch.
  const CollectiveCall& Post(int64_t device, size_t index) const {
    return shared_.posts[device][index];
  }

  void Move(const CollectiveCall& call, size_t index, std::byte* out) {
    const std::vector<int64_t>& members = call.members();
    const int64_t n = call.group_size(), p = call.position;
    const int64_t esize = ByteWidth(call.dtype);
    switch (call.kind) {
      case CollectiveKind::kAllReduce: {
        // This device reduces element chunk p and writes it to every member.
        const int64_t count = call.in_bytes / esize;
        const int64_t begin = count * p / n, end = count * (p + 1) / n;
        if (end == begin) return;
        std::vector<const std::byte*>& inputs = Inputs(n);
        for (int64_t m = 0; m < n; ++m) inputs[m] = Post(members[m], index).in + begin * esize;
        std::byte* mine = out + begin * esize;
        ReduceBuffers(call.dtype, call.op, inputs.data(), n, mine, end - begin);
        for (int64_t m = 0; m < n; ++m) {
          if (m != p)
            std::memcpy(Post(members[m], index).out + begin * esize, mine, (end - begin) * esize);
        }
        return;
      }
      // Chunked buffers are [outer, n, row] (outer is 1 but for strided
      // chunks): chunk i is row i of every outer block.
      case CollectiveKind::kAllGather:
      case CollectiveKind::kVerifyHash: {
        const int64_t outer = call.outer, row = call.in_bytes / outer;
        if (row == 0) return;
        for (int64_t m = 0; m < n; ++m) {
          std::byte* dst = m == p ? out : Post(members[m], index).out;
          for (int64_t o = 0; o < outer; ++o)
            CopyBytes(dst + (o * n + p) * row, call.in + o * row, row);
        }
        return;
      }
      case CollectiveKind::kReduceScatter: {
        const int64_t outer = call.outer, row = call.out_bytes / outer;
        if (row == 0) return;
        std::vector<const std::byte*>& inputs = Inputs(n);
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t m = 0; m < n; ++m)
            inputs[m] = Post(members[m], index).in + (o * n + p) * row;
          ReduceBuffers(call.dtype, call.op, inputs.data(), n, out + o * row, row / esize);
        }
        return;
      }
      case CollectiveKind::kAllToAll: {
        const int64_t outer = call.outer, row = call.in_bytes / (outer * n);
        if (row == 0) return;
        if (out == call.in) {  // SwapsInPlace
          for (int64_t m = 0; m < n; ++m) {
            if (m != p) SwapShare(out, Post(members[m], index).out, p, m, n, outer, row, esize);
          }
          return;
        }
        if (call.out_outer == outer) {
          for (int64_t o = 0; o < outer; ++o) {
            for (int64_t m = 0; m < n; ++m)
              CopyBytes(out + (o * n + m) * row, Post(members[m], index).in + (o * n + p) * row,
                        row);
          }
          return;
        }
        // The output's rows differ from the input's: each chunk's bytes in
        // order, from rows of `row` into rows of `out_row`.
        const int64_t out_row = call.out_bytes / (call.out_outer * n);
        for (int64_t m = 0; m < n; ++m) {
          CopyChunk(Post(members[m], index).in + p * row, row, n * row, out + m * out_row, out_row,
                    n * out_row, outer * row);
        }
        return;
      }
      case CollectiveKind::kCollectivePermute: {
        if (call.in_bytes == 0) return;
        for (const auto& pair : call.pairs) {
          if (pair.target != device_) continue;
          std::memcpy(out, Post(pair.source, index).in, call.in_bytes);
          return;
        }
        std::memset(out, 0, call.in_bytes);
        return;
      }
      case CollectiveKind::kBarrier:
        return;
    }
  }

  // Members p and m of an in-place all-to-all (buffers [outer, n, row
  // bytes]) exchange chunk m of p's buffer with chunk p of m's. Each swaps
  // its half, so the two never touch the same bytes: the member earlier in
  // the group the first half of the outer rows (of the row's elements when
  // there is one row), the other the rest.
  static void SwapShare(std::byte* mine, std::byte* theirs, int64_t p, int64_t m, int64_t n,
                        int64_t outer, int64_t row, int64_t esize) {
    const bool first = p < m;
    auto swap = [&](int64_t o, int64_t begin, int64_t end) {
      SwapBytes(mine + (o * n + m) * row + begin, theirs + (o * n + p) * row + begin, end - begin);
    };
    if (outer > 1) {
      const int64_t half = outer / 2;
      for (int64_t o = first ? 0 : half; o < (first ? half : outer); ++o) swap(o, 0, row);
    } else {
      const int64_t half = row / esize / 2 * esize;
      if (first) {
        swap(0, 0, half);
      } else {
        swap(0, half, row);
      }
    }
  }

  // `bytes` bytes of a chunk that lies in rows of `in_row` bytes, `in_pitch`
  // apart, copied in order into rows of `out_row` bytes, `out_pitch` apart.
  static void CopyChunk(const std::byte* in, int64_t in_row, int64_t in_pitch, std::byte* out,
                        int64_t out_row, int64_t out_pitch, int64_t bytes) {
    int64_t in_at = 0, out_at = 0;  // bytes into the current rows
    for (int64_t done = 0; done < bytes;) {
      const int64_t k = std::min(in_row - in_at, out_row - out_at);
      CopyBytes(out + out_at, in + in_at, static_cast<size_t>(k));
      done += k;
      in_at += k;
      out_at += k;
      if (in_at == in_row) {
        in += in_pitch;
        in_at = 0;
      }
      if (out_at == out_row) {
        out += out_pitch;
        out_at = 0;
      }
    }
  }

  static void SwapBytes(std::byte* a, std::byte* b, int64_t bytes) {
    std::array<std::byte, 4096> tmp;
    for (int64_t at = 0; at < bytes; at += static_cast<int64_t>(tmp.size())) {
      const size_t k = static_cast<size_t>(std::min<int64_t>(tmp.size(), bytes - at));
      std::memcpy(tmp.data(), a + at, k);
      std::memcpy(a + at, b + at, k);
      std::memcpy(b + at, tmp.data(), k);
    }
  }

  // The reduction's input pointers, one per group member; kept across calls
  // (no allocation per collective).
  std::vector<const std::byte*>& Inputs(int64_t n) {
    inputs_.resize(n);
    return inputs_;
  }

  LocalCluster::Shared& shared_;
  const int64_t device_;
  std::vector<std::byte> scratch_;
  std::vector<char> staged_;  // per call of the last batch moved: its output went to scratch_
  std::vector<const std::byte*> inputs_;
  std::vector<Meeting*> meetings_;  // the meetings this device took part in
};

}  // namespace

LocalCluster::Shared::Shared(int64_t num_devices)
    : n(num_devices),
      everyone([num_devices] {
        std::vector<int64_t> all(num_devices);
        for (int64_t d = 0; d < num_devices; ++d) all[d] = d;
        return all;
      }()),
      posts(num_devices),
      at_barrier(num_devices),
      last_sequence(num_devices),
      exited(num_devices, 1),
      stacks(num_devices),
      fibers(num_devices) {}

namespace {

std::string FormatDuration(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return fmt::format("{} s", d.count() / 1000);
  return fmt::format("{} ms", d.count());
}

}  // namespace

LocalCluster::Shared::Meeting& LocalCluster::Shared::MeetingOf(
    const std::vector<int64_t>& members) {
  std::lock_guard<std::mutex> lock(meetings_mu);
  std::unique_ptr<Meeting>& meeting = meetings[members];
  if (!meeting) meeting = std::make_unique<Meeting>(members);
  return *meeting;
}

std::string LocalCluster::Shared::CheckAgainstOtherGroups(std::span<const CollectiveCall> calls,
                                                          int64_t device) {
  for (const CollectiveCall& call : calls) {
    Passed& entry = passed[call.sequence % passed.size()];
    if (entry.sequence != call.sequence) {
      entry = {call.sequence, call.fingerprint, call.members().front()};
    } else if (entry.fingerprint != call.fingerprint) {
      return fmt::format(
          "devices run different collectives: device {} runs {} but device {} ran a different "
          "collective (kind, type, size or groups) as its collective #{}; every device must run "
          "the same collectives in the same order with the same shapes",
          device, call.Describe(), entry.device, call.sequence);
    }
  }
  return "";
}

std::string LocalCluster::Shared::TimeoutMessage(const Meeting& meeting,
                                                 const CollectiveCall& call) const {
  std::vector<int64_t> missing, waiting;
  for (int64_t d : meeting.members)
    (at_barrier[d].load(std::memory_order_relaxed) ? waiting : missing).push_back(d);
  std::string whereabouts;
  for (int64_t d : missing) {
    whereabouts += fmt::format("; device {} ", d);
    const int64_t sequence = last_sequence[d].load(std::memory_order_relaxed);
    if (sequence == 0) {
      whereabouts += "has entered no collective in this run";
    } else {
      whereabouts += fmt::format("last entered collective #{}", sequence);
    }
  }
  return fmt::format(
      "collective timeout: device{} {} did not arrive at {} within {} while device{} {} waited "
      "there{}. A device that does not arrive is hung, deadlocked, or far slower than the others; "
      "if it is only slow, raise the timeout (WEFT_COLLECTIVE_TIMEOUT=<seconds> or "
      "--collective-timeout <seconds>)",
      missing.size() == 1 ? "" : "s", fmt::join(missing, ","), call.Describe(),
      FormatDuration(timeout), waiting.size() == 1 ? "" : "s", fmt::join(waiting, ","),
      whereabouts);
}

void LocalCluster::Shared::Arrive(Meeting& meeting, int64_t device, const CollectiveCall& call,
                                  bool watchdog, const std::function<void()>& last) {
  // Under `mu`: a member that returned from its program (-1: none).
  auto returned_member = [&]() -> int64_t {
    for (int64_t d : finished) {
      if (std::find(meeting.members.begin(), meeting.members.end(), d) != meeting.members.end())
        return d;
    }
    return -1;
  };
  auto never_arrives = [&](int64_t returned) {
    Fail(
        "device {} returned from its program while device {} waits in {}; every device must "
        "run the same collectives in the same order",
        returned, device, call.Describe());
  };
  // Under `mu`: whether this barrier can no longer be released.
  auto doomed = [&] { return aborted || returned_member() >= 0; };
  if (stopped.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted) throw ClusterAborted{};
    if (const int64_t returned = returned_member(); returned >= 0) never_arrives(returned);
  }
  // No other member can release this barrier before this one arrives, so
  // the generation read here is the one being waited for.
  std::atomic<uint64_t>& released_generation = meeting.released_generation;
  const uint64_t my_generation = released_generation.load(std::memory_order_acquire);
  at_barrier[device].store(1, std::memory_order_relaxed);
  last_sequence[device].store(call.sequence, std::memory_order_relaxed);
  // Arrival takes no lock: under a mutex, a device preempted while holding
  // it (more devices than cores) made every other arriving device sleep on
  // the mutex as well; only the last to arrive locks it. acq_rel: the last to arrive sees every
  // member's writes before its arrival (the posts, and the data moved between barriers 1 and 2).
  const int64_t size = static_cast<int64_t>(meeting.members.size());
  if (meeting.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == size) {
    {
      // Only the last to arrive locks (contended only by another group's
      // release). Under the lock, a run that failed meanwhile (the watchdog
      // decides under it too) is seen before `last` reads the other
      // members' posts: a device that gave up has unwound its call.
      std::lock_guard<std::mutex> lock(mu);
      if (aborted) throw ClusterAborted{};
      if (last) last();
      meeting.arrived.store(0, std::memory_order_relaxed);
      for (int64_t d : meeting.members) at_barrier[d].store(0, std::memory_order_relaxed);
      // Release order: the members that see the new generation see every
      // member's writes before this barrier.
      released_generation.store(my_generation + 1, std::memory_order_release);
      barrier_cv.notify_all();  // devices in the slow path below
    }
    WakeThreads();
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  // The device's fiber gives its thread to the thread's other devices; when
  // all of them wait, the thread spins, then sleeps (LocalCluster::Run's
  // thread loop).
  Worker* worker = CurrentWorker();
  WEFT_INTERNAL_CHECK(worker != nullptr, "LocalCluster: device {} waits outside its fiber", device);
  ++worker->progress;  // this device ran up to here since it last yielded
  for (;;) {
    if (released_generation.load(std::memory_order_acquire) != my_generation) return;
    // A device of another group returning does not stop this meeting.
    if (stopped.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(mu);
      if (doomed()) break;
    }
    if (watchdog) {
      if (std::chrono::steady_clock::now() >= start + timeout) break;
      worker->deadline = std::min(worker->deadline, start + timeout);
    }
    const int64_t ran_before = worker->ran_ns.load(std::memory_order_relaxed);
    Fiber::Yield();
    // What the thread it yielded on ran since, less this device's own run
    // that ended at the yield (added when the thread got the fiber back,
    // before any thread could take it again).
    const int64_t others = worker->ran_ns.load(std::memory_order_relaxed) - ran_before -
                           fibers[device].last_run_ns.load(std::memory_order_relaxed);
    comms[device]->NoteOthersRan(std::chrono::nanoseconds(std::max<int64_t>(others, 0)));
    worker = CurrentWorker();
  }
  // Stopped or timed out: decide under the mutex, as every failure is
  // recorded.
  std::unique_lock<std::mutex> lock(mu);
  auto released = [&] {
    return released_generation.load(std::memory_order_acquire) != my_generation || doomed();
  };
  if (watchdog) {
    barrier_cv.wait_until(lock, start + timeout, released);
  } else {
    barrier_cv.wait(lock, released);
  }
  if (released_generation.load(std::memory_order_acquire) != my_generation) return;
  if (aborted) throw ClusterAborted{};
  if (const int64_t returned = returned_member(); returned >= 0) never_arrives(returned);
  WEFT_INTERNAL_CHECK(watchdog, "LocalCluster: device {} released from {} without a cause", device,
                      call.Describe());
  // The watchdog: this device is the first to give up (the others are still
  // waiting, or see `aborted`). Its error is the run's error.
  const std::string message = TimeoutMessage(meeting, call);
  timed_out_at = std::chrono::steady_clock::now();
  if (!aborted) {
    first_error = fmt::format("device {}: {}", device, message);
    error_is_internal = false;
  }
  aborted = true;
  stopped.store(true, std::memory_order_release);
  WakeSleepers();
  exit_cv.notify_all();  // Run waits a grace from timed_out_at
  throw ClusterAborted{};
}

void LocalCluster::Shared::RecordError(const std::string& message, bool internal) {
  std::lock_guard<std::mutex> lock(mu);
  if (!aborted) {
    first_error = message;
    error_is_internal = internal;
  }
  aborted = true;
  stopped.store(true, std::memory_order_release);
  WakeSleepers();
}

void LocalCluster::Shared::MarkFinished(int64_t device) {
  std::lock_guard<std::mutex> lock(mu);
  finished.push_back(device);
  stopped.store(true, std::memory_order_release);
  WakeSleepers();
}

void LocalCluster::Shared::WakeThreads() {
  wake.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) > 0) FutexWakeAll(wake);
}

void LocalCluster::Shared::WakeSleepers() {
  WakeThreads();
  barrier_cv.notify_all();
}

void LocalCluster::Shared::MarkExited(int64_t device) {
  std::lock_guard<std::mutex> lock(mu);
  exited[device] = 1;
  exit_cv.notify_all();
}

void LocalCluster::Shared::Reset(std::chrono::milliseconds collective_timeout) {
  std::lock_guard<std::mutex> lock(mu);
  {
    std::lock_guard<std::mutex> meetings_lock(meetings_mu);
    for (auto& [members, meeting] : meetings) meeting->arrived.store(0, std::memory_order_relaxed);
  }
  passed.fill({});
  aborted = false;
  stopped.store(false, std::memory_order_release);
  error_is_internal = false;
  finished.clear();
  first_error.clear();
  timeout = collective_timeout;
  timed_out_at.reset();
  for (auto& flag : at_barrier) flag.store(0, std::memory_order_relaxed);
  for (auto& sequence : last_sequence) sequence.store(0, std::memory_order_relaxed);
  for (auto& post : posts) post = {};
  for (auto& comm : comms) comm->StartRun();
}

LocalCluster::LocalCluster(int64_t num_devices) {
  WEFT_CHECK(num_devices >= 1 && num_devices <= 4096,
             "LocalCluster: {} devices requested; use 1..4096", num_devices);
  shared_ = std::make_shared<Shared>(num_devices);
  for (int64_t d = 0; d < num_devices; ++d)
    shared_->comms.push_back(std::make_unique<ThreadCommunicator>(*shared_, d));
}

LocalCluster::LocalCluster(const Topology& topology) : LocalCluster(topology.num_devices()) {}

LocalCluster::~LocalCluster() = default;

int64_t LocalCluster::num_devices() const { return shared_->n; }

Communicator& LocalCluster::communicator(int64_t device) {
  WEFT_INTERNAL_CHECK(device >= 0 && device < shared_->n,
                      "LocalCluster: device {} is out of range 0..{}", device, shared_->n - 1);
  return *shared_->comms[device];
}

int64_t LocalCluster::threads() const {
  return threads_ ? *threads_ : std::min<int64_t>(shared_->n, ThreadPool::Global().num_threads());
}

void LocalCluster::set_threads(int64_t threads) {
  WEFT_CHECK(threads >= 1 && threads <= shared_->n,
             "LocalCluster: {} threads for {} devices; give 1..{}", threads, shared_->n,
             shared_->n);
  threads_ = threads;
}

void LocalCluster::set_collective_timeout(std::chrono::milliseconds timeout) {
  WEFT_CHECK(timeout.count() > 0, "the collective timeout must be positive, got {} ms",
             timeout.count());
  timeout_ = timeout;
}

void LocalCluster::Run(const DeviceFn& fn) {
  Shared& s = *shared_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    std::vector<int64_t> hung;
    for (int64_t d = 0; d < s.n; ++d)
      if (!s.exited[d]) hung.push_back(d);
    WEFT_CHECK(hung.empty(),
               "LocalCluster: device{} {} of an earlier run that timed out in a collective never "
               "returned; create a new cluster (or end the process)",
               hung.size() == 1 ? "" : "s", fmt::join(hung, ","));
  }
  const std::chrono::milliseconds timeout =
      timeout_ ? *timeout_
               : std::chrono::milliseconds(
                     std::chrono::seconds(CurrentConfigValue(ConfigKey::kCollectiveTimeout)));
  s.Reset(timeout);
  // The threads own copies of the state they touch, so a hung thread that is
  // detached below never reads a destroyed cluster or function.
  auto shared = shared_;
  auto program = std::make_shared<const DeviceFn>(fn);
  auto device_main = [shared, program](int64_t d) {
    Shared& s = *shared;
    try {
      (*program)(d, *s.comms[d]);
      s.MarkFinished(d);
    } catch (const ClusterAborted&) {
      // Another device failed first (or the watchdog fired); that error is
      // the one reported.
    } catch (const Error& e) {
      s.RecordError(fmt::format("device {}: {}", d, e.what()), /*internal=*/false);
    } catch (const std::exception& e) {
      // weft::InternalError, or any exception weft did not raise on purpose
      // (std::bad_alloc, std::out_of_range, ...): a bug, not bad input.
      s.RecordError(fmt::format("device {}: {}", d, e.what()), /*internal=*/true);
    } catch (...) {
      s.RecordError(fmt::format("device {}: unknown exception", d), /*internal=*/true);
    }
    s.MarkExited(d);
  };
  const int64_t num_threads = threads();
  for (int64_t d = 0; d < s.n; ++d) {
    if (!s.stacks[d]) s.stacks[d] = std::make_unique<Fiber::Stack>();
  }
  for (int64_t d = 0; d < s.n; ++d) {
    Shared::DeviceFiber& f = s.fibers[d];
    f.fiber = std::make_unique<Fiber>(*s.stacks[d], [device_main, d] { device_main(d); });
    f.held.store(false, std::memory_order_relaxed);
    f.started.store(false, std::memory_order_relaxed);
    f.last_run_ns.store(0, std::memory_order_relaxed);
  }
  s.workers.resize(num_threads);
  for (auto& worker : s.workers) worker = std::make_unique<Worker>();
  // Thread t runs its devices t, t + num_threads, ... as fibers. When all of
  // them wait, it runs a device of another thread that can go on (its
  // thread is busy with its other device, or lost its core to the host)
  // before it spins or sleeps: tiny's 2 x 2 mesh on two cores spent 2-7% of
  // a step with one thread idle, three quarters of that while the other
  // thread held such a device (docs/PERFORMANCE.md).
  auto thread_main = [shared, num_threads](int64_t t) {
    Shared& s = *shared;
    Worker& worker = *s.workers[t];
    t_worker = &worker;
    // Runs device d's fiber until it yields or returns (the caller holds
    // it); its return is progress.
    auto run = [&s, &worker](int64_t d) {
      Shared::DeviceFiber& f = s.fibers[d];
      worker.running.store(d, std::memory_order_relaxed);
      const auto start = std::chrono::steady_clock::now();
      f.fiber->Resume();
      worker.running.store(-1, std::memory_order_relaxed);
      const int64_t ran = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now() - start)
                              .count();
      f.last_run_ns.store(ran, std::memory_order_relaxed);
      worker.ran_ns.fetch_add(ran, std::memory_order_relaxed);
      if (f.fiber->finished()) ++worker.progress;
    };
    auto hold = [&s](int64_t d) {
      bool free = false;
      return s.fibers[d].held.compare_exchange_strong(free, true, std::memory_order_acquire,
                                                      std::memory_order_relaxed);
    };
    auto let_go = [&s](int64_t d) { s.fibers[d].held.store(false, std::memory_order_release); };
    std::vector<int64_t> mine;
    for (int64_t d = t; d < s.n; d += num_threads) mine.push_back(d);
    std::vector<char> done(mine.size(), 0);
    size_t running = mine.size();
    int64_t next_other = t + 1;  // where the next look at other threads' devices starts
    while (running > 0) {
      worker.active.store(true, std::memory_order_relaxed);
      // Read before the round: a release during it changes `wake`, so the
      // wait below returns at once.
      const uint32_t seen = s.wake.load(std::memory_order_acquire);
      const uint64_t progress = worker.progress;
      worker.deadline = std::chrono::steady_clock::time_point::max();
      for (size_t i = 0; i < mine.size(); ++i) {
        const int64_t d = mine[i];
        if (done[i] || !hold(d)) continue;  // held: another thread runs it
        Shared::DeviceFiber& f = s.fibers[d];
        f.started.store(true, std::memory_order_relaxed);
        if (f.fiber->finished()) {  // returned on another thread
          ++worker.progress;
        } else {
          run(d);
        }
        if (f.fiber->finished()) {
          done[i] = 1;
          --running;
        }
        let_go(d);
      }
      if (running == 0 || worker.progress != progress) continue;
      // Every device of this thread waits. Run a device of another thread
      // that does not wait at a barrier while that thread goes through its
      // devices (it gets to that one only after the one it runs yields), if
      // any.
      for (int64_t k = 0; k < s.n && worker.progress == progress; ++k) {
        const int64_t d = (next_other + k) % s.n;
        Shared::DeviceFiber& f = s.fibers[d];
        const int64_t owner = d % num_threads;
        const bool alone = d < num_threads && d + num_threads >= s.n;  // its thread's only device
        if (owner == t || alone || !f.started.load(std::memory_order_relaxed) ||
            s.at_barrier[d].load(std::memory_order_relaxed) ||
            !s.workers[owner]->active.load(std::memory_order_relaxed) || !hold(d))
          continue;
        if (!f.fiber->finished()) run(d);
        let_go(d);
        // Its thread may have found it held, and sleep: a release while this
        // thread ran it (it may go on), or its return, would go unseen.
        s.WakeThreads();
        next_other = d + 1;
      }
      if (worker.progress != progress) continue;
      worker.active.store(false, std::memory_order_relaxed);
      // The threads are no more than the cores, so spinning takes no core
      // from a device that has work; a futex wake-up of a sleeping vCPU
      // costs tens of microseconds on a KVM guest.
      const auto now = std::chrono::steady_clock::now();
      const auto spin_until = std::min(worker.deadline, now + kSpin);
      while (s.wake.load(std::memory_order_acquire) == seen &&
             std::chrono::steady_clock::now() < spin_until) {
        for (int i = 0; i < 64; ++i) CpuRelax();
      }
      if (s.wake.load(std::memory_order_acquire) != seen) continue;
      std::optional<std::chrono::nanoseconds> left;
      if (worker.deadline != std::chrono::steady_clock::time_point::max()) {
        left = worker.deadline - std::chrono::steady_clock::now();
        if (left->count() <= 0) continue;
      }
      s.sleepers.fetch_add(1, std::memory_order_seq_cst);
      FutexWait(s.wake, seen, left);
      s.sleepers.fetch_sub(1, std::memory_order_relaxed);
    }
    worker.active.store(false, std::memory_order_relaxed);
    t_worker = nullptr;
  };
  std::vector<std::thread> workers;
  workers.reserve(num_threads);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    std::fill(s.exited.begin(), s.exited.end(), 0);
  }
  // The devices' teams get the cores; this thread's idle workers would
  // count against them (ThreadPool::EndWorkersOfThisThread).
  ThreadPool::EndWorkersOfThisThread();
  try {
    for (int64_t t = 0; t < num_threads; ++t) workers.emplace_back(thread_main, t);
  } catch (const std::exception& e) {
    s.RecordError(fmt::format("LocalCluster: could not start thread {} of {}: {}", workers.size(),
                              num_threads, e.what()),
                  /*internal=*/false);
    std::lock_guard<std::mutex> lock(s.mu);
    for (int64_t d = 0; d < s.n; ++d) {
      if (d % num_threads >= static_cast<int64_t>(workers.size())) s.exited[d] = 1;
    }
  }
  {
    // Every device returns, except perhaps the devices that never arrived at
    // a timed-out collective (and those behind them on their threads): they
    // get a grace to reach their next collective (which releases them) or
    // to return.
    const auto grace = std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(2));
    std::unique_lock<std::mutex> lock(s.mu);
    auto all_exited = [&] {
      return std::all_of(s.exited.begin(), s.exited.end(), [](char e) { return e != 0; });
    };
    while (!all_exited()) {
      if (s.timed_out_at) {
        if (s.exit_cv.wait_until(lock, *s.timed_out_at + grace, all_exited)) break;
        if (std::chrono::steady_clock::now() >= *s.timed_out_at + grace) break;
      } else {
        s.exit_cv.wait(lock, [&] { return all_exited() || s.timed_out_at.has_value(); });
      }
    }
  }
  for (size_t t = 0; t < workers.size(); ++t) {
    bool done = true;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      for (int64_t d = static_cast<int64_t>(t); d < s.n; d += num_threads)
        done = done && s.exited[d] != 0;
      // Nor a device of another thread that it runs.
      const int64_t other = s.workers[t]->running.load(std::memory_order_relaxed);
      done = done && (other < 0 || s.exited[other] != 0);
    }
    // A thread whose devices all returned ends at once; a hung one is left
    // running with its own references to the shared state.
    if (done) {
      workers[t].join();
    } else {
      workers[t].detach();
    }
  }
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.aborted) return;
  if (s.error_is_internal) throw InternalError(s.first_error);
  throw Error(s.first_error);
}

}  // namespace weft::runtime
