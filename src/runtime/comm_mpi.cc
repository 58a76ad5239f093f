// The MPI backend. Data moves with MPI's byte-wise nonblocking collectives
// (ialltoall(v), iallgather(v), ibarrier) and point-to-point messages; every
// reduction is local, in group-member order, through the same ReduceBuffers
// as the threads backend, so the bits are those of the blocking calls before.
//
// Bounded waits: a rank polls its requests until they complete or the
// collective timeout passes. Then it asks the ranks it waits for, on a
// separate control communicator, where they are (each rank answers while it
// polls), names those that did not arrive, and fails; RunMpiMain prints the
// message, keeps answering the other ranks' questions for a short grace (so
// every waiting rank can print its own report), then calls MPI_Abort.
#include "weft/runtime/comm_mpi.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <thread>

#include "mpi_util.h"
#include "reduce.h"
#include "weft/base/error.h"
#include "weft/runtime/config.h"
#include "weft/runtime/topology.h"

namespace weft::runtime {

namespace {

constexpr int kPermuteTag = 7301;
constexpr int kHelloTag = 7302;  // on MPI_COMM_WORLD, once, in the constructor
constexpr int kQueryTag = 7311;  // on the control communicator
constexpr int kReplyTag = 7312;

// What a rank answers when asked where it is.
enum RankState : int64_t {
  kOutside = 0,   // between collectives (only seen after it timed out)
  kWaiting = 1,   // polling in collective #sequence
  kTimedOut = 2,  // gave up in collective #sequence and is about to abort
};

using Clock = std::chrono::steady_clock;

// How long a rank that timed out waits for answers, and then keeps answering
// before it aborts: long enough for a busy, oversubscribed machine.
std::chrono::milliseconds DiagnosisGrace(std::chrono::milliseconds timeout) {
  return std::clamp<std::chrono::milliseconds>(timeout / 2, std::chrono::seconds(1),
                                               std::chrono::seconds(5));
}

// MPI counts are int; larger messages would need derived types.
int MessageBytes(int64_t bytes, const CollectiveCall& call) {
  WEFT_CHECK(bytes <= INT_MAX,
             "{}: a message of {} bytes exceeds the MPI backend's 2 GiB limit per message; "
             "split the tensor",
             call.Describe(), bytes);
  return static_cast<int>(bytes);
}

}  // namespace

struct MpiCommunicator::Impl {
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm control = MPI_COMM_NULL;  // where ranks ask each other where they are
  int rank = 0;
  int size = 1;
  std::map<ReplicaGroups, MPI_Comm> group_comms;
  std::vector<std::byte> tmp;
  std::chrono::milliseconds timeout{std::chrono::seconds(kDefaultCollectiveTimeoutSeconds)};

  // Where this rank is, for the answers.
  int64_t sequence = 0;
  CollectiveKind kind = CollectiveKind::kBarrier;
  RankState state = kOutside;
  bool timed_out = false;
  // Answers in flight (a deque: their buffers must not move).
  std::deque<std::array<int64_t, 3>> answers;
  std::vector<MPI_Request> answer_requests;
  // The question this rank asks after a timeout: the collective's sequence.
  // A member, since the sends may outlive Diagnose.
  int64_t question = 0;
  int hello = 0;  // the constructor's start-up message (sends may outlive it)

  // Answers every question waiting on the control communicator; true when
  // there was one (a peer timed out).
  bool AnswerQuestions();
  // Polls `requests` until they complete. After the timeout (or when a peer
  // that timed out asks), finds which of `peers` did not arrive and throws
  // weft::Error saying so.
  void Wait(std::vector<MPI_Request>& requests, const CollectiveCall& call,
            const std::vector<int>& peers, const char* what);
  std::string Diagnose(const CollectiveCall& call, const std::vector<int>& peers, const char* what);
  // Keeps answering for the grace after a timeout, before the abort.
  void AnswerUntil(Clock::time_point until);
  std::vector<int> AllPeers() const {
    std::vector<int> peers;
    for (int r = 0; r < size; ++r)
      if (r != rank) peers.push_back(r);
    return peers;
  }
  std::vector<int> GroupPeers(const CollectiveCall& call) const {
    std::vector<int> peers;
    for (int64_t d : call.members())
      if (d != rank) peers.push_back(static_cast<int>(d));
    return peers;
  }

  // The communicator of this rank's group; its ranks are group positions.
  MPI_Comm CommFor(const CollectiveCall& call) {
    if (call.groups->size() == 1) {
      bool in_order = true;
      for (int64_t i = 0; i < call.group_size(); ++i) in_order = in_order && call.members()[i] == i;
      if (in_order) return world;
    }
    auto it = group_comms.find(*call.groups);
    if (it != group_comms.end()) return it->second;
    // MPI_Comm_split blocks; a barrier with a deadline first makes sure every
    // rank is here, so a stopped rank is named instead of hanging the split.
    std::vector<MPI_Request> barrier(1);
    CheckMpi(MPI_Ibarrier(world, &barrier[0]), "MPI_Ibarrier");
    Wait(barrier, call, AllPeers(), "the group set-up of");
    MPI_Comm comm = MPI_COMM_NULL;
    CheckMpi(MPI_Comm_split(world, static_cast<int>(call.group_index),
                            static_cast<int>(call.position), &comm),
             "MPI_Comm_split");
    group_comms.emplace(*call.groups, comm);
    return comm;
  }

  std::byte* Tmp(int64_t bytes) {
    if (static_cast<int64_t>(tmp.size()) < bytes) tmp.resize(bytes);
    return tmp.data();
  }

  void AllReduce(const CollectiveCall& call);
  void ReduceScatter(const CollectiveCall& call);
  void AllToAll(const CollectiveCall& call);
  void Permute(const CollectiveCall& call);
};

void MpiCommunicator::Impl::AllReduce(const CollectiveCall& call) {
  // Member m reduces element chunk m (the threads backend's chunks): an
  // alltoallv brings it every member's copy of its chunk, in member order;
  // an allgatherv then shares the reduced chunks.
  const int64_t n = call.group_size(), p = call.position;
  const int64_t esize = ByteWidth(call.dtype), count = call.in_bytes / esize;
  if (n == 1) {
    if (call.out != call.in) std::memcpy(call.out, call.in, call.in_bytes);
    return;
  }
  std::vector<int> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
  const int64_t my_len = count * (p + 1) / n - count * p / n;
  for (int64_t m = 0; m < n; ++m) {
    const int64_t begin = count * m / n, end = count * (m + 1) / n;
    send_counts[m] = MessageBytes((end - begin) * esize, call);
    send_displs[m] = MessageBytes(begin * esize, call);
    recv_counts[m] = MessageBytes(my_len * esize, call);
    recv_displs[m] = MessageBytes(m * my_len * esize, call);
  }
  std::byte* gathered = Tmp(n * my_len * esize);
  MPI_Comm comm = CommFor(call);
  std::vector<MPI_Request> request(1);
  CheckMpi(MPI_Ialltoallv(call.in, send_counts.data(), send_displs.data(), MPI_BYTE, gathered,
                          recv_counts.data(), recv_displs.data(), MPI_BYTE, comm, &request[0]),
           "MPI_Ialltoallv");
  Wait(request, call, GroupPeers(call), nullptr);
  std::vector<const std::byte*> inputs(n);
  for (int64_t m = 0; m < n; ++m) inputs[m] = gathered + m * my_len * esize;
  ReduceBuffers(call.dtype, call.op, inputs.data(), n, call.out + (count * p / n) * esize, my_len);
  // Each member's reduced chunk is already where allgatherv would put it.
  CheckMpi(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, call.out, send_counts.data(),
                           send_displs.data(), MPI_BYTE, comm, &request[0]),
           "MPI_Iallgatherv");
  Wait(request, call, GroupPeers(call), nullptr);
}

void MpiCommunicator::Impl::ReduceScatter(const CollectiveCall& call) {
  const int64_t n = call.group_size(), shard = call.out_bytes;
  const int bytes = MessageBytes(shard, call);
  MessageBytes(call.in_bytes, call);
  std::byte* gathered = Tmp(call.in_bytes);
  MPI_Comm comm = CommFor(call);
  std::vector<MPI_Request> request(1);
  CheckMpi(MPI_Ialltoall(call.in, bytes, MPI_BYTE, gathered, bytes, MPI_BYTE, comm, &request[0]),
           "MPI_Ialltoall");
  Wait(request, call, GroupPeers(call), nullptr);
  std::vector<const std::byte*> inputs(n);
  for (int64_t m = 0; m < n; ++m) inputs[m] = gathered + m * shard;
  ReduceBuffers(call.dtype, call.op, inputs.data(), n, call.out, shard / ByteWidth(call.dtype));
}

void MpiCommunicator::Impl::AllToAll(const CollectiveCall& call) {
  const int64_t n = call.group_size();
  const int chunk = MessageBytes(call.in_bytes / n, call);
  MessageBytes(call.in_bytes, call);
  const std::byte* in = call.in;
  if (in == call.out) {
    in = Tmp(call.in_bytes);
    std::memcpy(const_cast<std::byte*>(in), call.out, call.in_bytes);
  }
  MPI_Comm comm = CommFor(call);
  std::vector<MPI_Request> request(1);
  CheckMpi(MPI_Ialltoall(in, chunk, MPI_BYTE, call.out, chunk, MPI_BYTE, comm, &request[0]),
           "MPI_Ialltoall");
  Wait(request, call, GroupPeers(call), nullptr);
}

void MpiCommunicator::Impl::Permute(const CollectiveCall& call) {
  if (call.in_bytes == 0) return;
  const int bytes = MessageBytes(call.in_bytes, call);
  int64_t source = -1, target = -1;
  for (const auto& pair : call.pairs) {
    if (pair.target == rank) source = pair.source;
    if (pair.source == rank) target = pair.target;
  }
  const std::byte* in = call.in;
  if (in == call.out) {
    in = Tmp(call.in_bytes);
    std::memcpy(const_cast<std::byte*>(in), call.out, call.in_bytes);
  }
  std::vector<MPI_Request> requests;
  std::vector<int> partners;  // the ranks this one waits for
  if (source >= 0 && source != rank) {
    requests.emplace_back();
    CheckMpi(MPI_Irecv(call.out, bytes, MPI_BYTE, static_cast<int>(source), kPermuteTag, world,
                       &requests.back()),
             "MPI_Irecv");
    partners.push_back(static_cast<int>(source));
  }
  if (target >= 0 && target != rank) {
    requests.emplace_back();
    CheckMpi(MPI_Isend(in, bytes, MPI_BYTE, static_cast<int>(target), kPermuteTag, world,
                       &requests.back()),
             "MPI_Isend");
    if (target != source) partners.push_back(static_cast<int>(target));
  }
  Wait(requests, call, partners, nullptr);
  if (source < 0) std::memset(call.out, 0, call.in_bytes);
  if (source == rank) std::memcpy(call.out, in, call.in_bytes);
}

bool MpiCommunicator::Impl::AnswerQuestions() {
  bool asked = false;
  for (;;) {
    int flag = 0;
    MPI_Status status;
    CheckMpi(MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, control, &flag, &status), "MPI_Iprobe");
    if (!flag) break;
    int64_t their_sequence = 0;
    CheckMpi(MPI_Recv(&their_sequence, 1, MPI_INT64_T, status.MPI_SOURCE, kQueryTag, control,
                      MPI_STATUS_IGNORE),
             "MPI_Recv");
    answers.push_back({sequence, static_cast<int64_t>(kind), static_cast<int64_t>(state)});
    answer_requests.emplace_back();
    CheckMpi(MPI_Isend(answers.back().data(), 3, MPI_INT64_T, status.MPI_SOURCE, kReplyTag, control,
                       &answer_requests.back()),
             "MPI_Isend");
    asked = true;
  }
  return asked;
}

void MpiCommunicator::Impl::AnswerUntil(Clock::time_point until) {
  while (Clock::now() < until) {
    AnswerQuestions();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void MpiCommunicator::Impl::Wait(std::vector<MPI_Request>& requests, const CollectiveCall& call,
                                 const std::vector<int>& peers, const char* what) {
  sequence = call.sequence;
  kind = call.kind;
  state = kWaiting;
  const auto deadline = Clock::now() + timeout;
  for (int64_t spins = 0;; ++spins) {
    int done = 0;
    CheckMpi(
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
        "MPI_Testall");
    if (done) break;
    // A question means a peer gave up on a collective this rank waits in too:
    // report at once, so every waiting rank prints before the job aborts.
    if (spins % 32 == 31 && (AnswerQuestions() || Clock::now() >= deadline)) {
      const std::string message = Diagnose(call, peers, what);
      Fail("{}", message);
    }
    if (spins > 1000) std::this_thread::yield();
  }
  state = kOutside;
}

std::string MpiCommunicator::Impl::Diagnose(const CollectiveCall& call,
                                            const std::vector<int>& peers, const char* what) {
  timed_out = true;
  state = kTimedOut;
  // Ask every peer where it is; peers that poll answer.
  question = call.sequence;
  const size_t n = peers.size();
  std::vector<std::array<int64_t, 3>> replies(n);
  std::vector<MPI_Request> asks(n, MPI_REQUEST_NULL), gets(n, MPI_REQUEST_NULL);
  for (size_t i = 0; i < n; ++i) {
    CheckMpi(MPI_Irecv(replies[i].data(), 3, MPI_INT64_T, peers[i], kReplyTag, control, &gets[i]),
             "MPI_Irecv");
    CheckMpi(MPI_Isend(&question, 1, MPI_INT64_T, peers[i], kQueryTag, control, &asks[i]),
             "MPI_Isend");
  }
  std::vector<char> answered(n, 0);
  const auto until = Clock::now() + DiagnosisGrace(timeout);
  for (size_t left = n; left > 0 && Clock::now() < until;) {
    AnswerQuestions();
    for (size_t i = 0; i < n; ++i) {
      if (answered[i]) continue;
      int flag = 0;
      CheckMpi(MPI_Test(&gets[i], &flag, MPI_STATUS_IGNORE), "MPI_Test");
      if (flag) {
        answered[i] = 1;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // Answers that did not come are cancelled, so no late one writes into
  // `replies`; questions still in flight are left to MPI (their buffer lives).
  for (size_t i = 0; i < n; ++i) {
    if (!answered[i]) {
      MPI_Cancel(&gets[i]);
      MPI_Wait(&gets[i], MPI_STATUS_IGNORE);
    }
    if (asks[i] != MPI_REQUEST_NULL) MPI_Request_free(&asks[i]);
  }
  std::vector<int> arrived{rank}, missing;
  std::string whereabouts;
  for (size_t i = 0; i < n; ++i) {
    const int peer = peers[i];
    if (!answered[i]) {
      missing.push_back(peer);
      whereabouts += fmt::format(
          "; rank {} does not answer (stopped, hung, or computing outside collectives)", peer);
      continue;
    }
    const int64_t their_sequence = replies[i][0];
    const auto their_kind = static_cast<CollectiveKind>(replies[i][1]);
    if (their_sequence >= call.sequence) {
      arrived.push_back(peer);
      continue;
    }
    missing.push_back(peer);
    whereabouts += their_sequence == 0
                       ? fmt::format("; rank {} has entered no collective yet", peer)
                       : fmt::format("; rank {} waits in {} #{}", peer,
                                     CollectiveKindName(their_kind), their_sequence);
  }
  std::sort(arrived.begin(), arrived.end());
  const std::string where =
      what == nullptr ? call.Describe() : fmt::format("{} {}", what, call.Describe());
  if (missing.empty()) {
    return fmt::format(
        "collective timeout: {} did not complete within {} although rank{} {} answered from it. "
        "{}",
        where, FormatTimeout(timeout), arrived.size() == 1 ? "" : "s", fmt::join(arrived, ","),
        kTimeoutAdvice);
  }
  return fmt::format(
      "collective timeout: rank{} {} did not arrive at {} within {} while rank{} {} waited "
      "there{}. {}",
      missing.size() == 1 ? "" : "s", fmt::join(missing, ","), where, FormatTimeout(timeout),
      arrived.size() == 1 ? "" : "s", fmt::join(arrived, ","), whereabouts, kTimeoutAdvice);
}

MpiCommunicator::MpiCommunicator() : impl_(std::make_unique<Impl>()) {
  Topology::InitMpi();
  impl_->timeout = std::chrono::seconds(CurrentConfigValue(ConfigKey::kCollectiveTimeout));
  // MPI_Comm_dup blocks until every rank calls it; a point-to-point exchange
  // with a deadline first names a rank that never comes.
  {
    int size = 1;
    CheckMpi(MPI_Comm_rank(MPI_COMM_WORLD, &impl_->hello), "MPI_Comm_rank");
    CheckMpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
    std::vector<int> all(size);
    AllGatherPointToPoint(MPI_COMM_WORLD, kHelloTag, &impl_->hello, sizeof(int), all.data(),
                          impl_->timeout, "the start of the MPI communicator (MpiCommunicator)");
  }
  CheckMpi(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->world), "MPI_Comm_dup");
  CheckMpi(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->control), "MPI_Comm_dup");
  // Errors come back as codes and become weft::Error with MPI's text.
  CheckMpi(MPI_Comm_set_errhandler(impl_->world, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  CheckMpi(MPI_Comm_set_errhandler(impl_->control, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  CheckMpi(MPI_Comm_rank(impl_->world, &impl_->rank), "MPI_Comm_rank");
  CheckMpi(MPI_Comm_size(impl_->world, &impl_->size), "MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Request& r : impl_->answer_requests) {
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }
  for (auto& [groups, comm] : impl_->group_comms) MPI_Comm_free(&comm);
  if (impl_->control != MPI_COMM_NULL) MPI_Comm_free(&impl_->control);
  if (impl_->world != MPI_COMM_NULL) MPI_Comm_free(&impl_->world);
}

int64_t MpiCommunicator::device_id() const { return impl_->rank; }
int64_t MpiCommunicator::num_devices() const { return impl_->size; }

void MpiCommunicator::set_collective_timeout(std::chrono::milliseconds timeout) {
  WEFT_CHECK(timeout.count() > 0, "the collective timeout must be positive, got {} ms",
             timeout.count());
  impl_->timeout = timeout;
}

std::chrono::milliseconds MpiCommunicator::collective_timeout() const { return impl_->timeout; }

void MpiCommunicator::DoCollective(const CollectiveCall& call) {
  switch (call.kind) {
    case CollectiveKind::kAllReduce:
      return impl_->AllReduce(call);
    case CollectiveKind::kAllGather:
    case CollectiveKind::kVerifyHash: {
      const int bytes = MessageBytes(call.in_bytes, call);
      MessageBytes(call.out_bytes, call);
      MPI_Comm comm = impl_->CommFor(call);
      std::vector<MPI_Request> request(1);
      CheckMpi(
          MPI_Iallgather(call.in, bytes, MPI_BYTE, call.out, bytes, MPI_BYTE, comm, &request[0]),
          "MPI_Iallgather");
      impl_->Wait(request, call, impl_->GroupPeers(call), nullptr);
      return;
    }
    case CollectiveKind::kReduceScatter:
      return impl_->ReduceScatter(call);
    case CollectiveKind::kAllToAll:
      return impl_->AllToAll(call);
    case CollectiveKind::kCollectivePermute:
      return impl_->Permute(call);
    case CollectiveKind::kBarrier: {
      std::vector<MPI_Request> request(1);
      CheckMpi(MPI_Ibarrier(impl_->world, &request[0]), "MPI_Ibarrier");
      impl_->Wait(request, call, impl_->AllPeers(), nullptr);
      return;
    }
  }
  FailInternal("MpiCommunicator: unknown collective kind {}", static_cast<int>(call.kind));
}

int RunMpiMain(const std::function<void(Communicator& comm)>& fn) {
  int rank = -1;
  // Outside the try: a failing rank aborts without first freeing
  // communicators, which could wait for ranks that are stuck elsewhere.
  std::unique_ptr<MpiCommunicator> comm;
  int code = 1;  // a bug (weft::InternalError or anything unexpected); bad input is 2
  try {
    Topology::InitMpi();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    comm = std::make_unique<MpiCommunicator>();
    fn(*comm);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    code = 2;
  } catch (const std::exception& e) {
    // weft::InternalError, or an exception weft did not raise on purpose.
    std::fprintf(stderr, "rank %d: internal error: %s (please report)\n", rank, e.what());
  } catch (...) {
    std::fprintf(stderr, "rank %d: internal error: unknown exception (please report)\n", rank);
  }
  std::fflush(stderr);
  // After a collective timeout, keep answering the other waiting ranks for a
  // grace, so each names the missing ranks before the abort ends them.
  if (comm && comm->impl_->timed_out) {
    try {
      comm->impl_->AnswerUntil(Clock::now() + DiagnosisGrace(comm->impl_->timeout));
    } catch (const std::exception&) {
      // The abort below ends the job either way.
    }
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace weft::runtime
