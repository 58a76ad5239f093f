// The MPI backend. Data moves with MPI's byte-wise collectives (allgather,
// alltoall(v)); every reduction is local, in group-member order, through the
// same ReduceBuffers as the threads backend.
#include "weft/runtime/comm_mpi.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "mpi_util.h"
#include "reduce.h"
#include "weft/base/error.h"
#include "weft/runtime/topology.h"

namespace weft::runtime {

namespace {

constexpr int kPermuteTag = 7301;

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
  int rank = 0;
  int size = 1;
  std::map<ReplicaGroups, MPI_Comm> group_comms;
  std::vector<std::byte> tmp;

  // The communicator of this rank's group; its ranks are group positions.
  MPI_Comm CommFor(const CollectiveCall& call) {
    if (call.groups.size() == 1) {
      bool in_order = true;
      for (int64_t i = 0; i < call.group_size(); ++i) in_order = in_order && call.members()[i] == i;
      if (in_order) return world;
    }
    auto it = group_comms.find(call.groups);
    if (it != group_comms.end()) return it->second;
    MPI_Comm comm = MPI_COMM_NULL;
    CheckMpi(MPI_Comm_split(world, static_cast<int>(call.group_index),
                            static_cast<int>(call.position), &comm),
             "MPI_Comm_split");
    group_comms.emplace(call.groups, comm);
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
  const int64_t esize = DataTypeSize(call.dtype), count = call.in_bytes / esize;
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
  CheckMpi(MPI_Alltoallv(call.in, send_counts.data(), send_displs.data(), MPI_BYTE, gathered,
                         recv_counts.data(), recv_displs.data(), MPI_BYTE, comm),
           "MPI_Alltoallv");
  std::vector<const std::byte*> inputs(n);
  for (int64_t m = 0; m < n; ++m) inputs[m] = gathered + m * my_len * esize;
  ReduceBuffers(call.dtype, call.op, inputs.data(), n, call.out + (count * p / n) * esize, my_len);
  // Each member's reduced chunk is already where allgatherv would put it.
  CheckMpi(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, call.out, send_counts.data(),
                          send_displs.data(), MPI_BYTE, comm),
           "MPI_Allgatherv");
}

void MpiCommunicator::Impl::ReduceScatter(const CollectiveCall& call) {
  const int64_t n = call.group_size(), shard = call.out_bytes;
  const int bytes = MessageBytes(shard, call);
  MessageBytes(call.in_bytes, call);
  std::byte* gathered = Tmp(call.in_bytes);
  CheckMpi(MPI_Alltoall(call.in, bytes, MPI_BYTE, gathered, bytes, MPI_BYTE, CommFor(call)),
           "MPI_Alltoall");
  std::vector<const std::byte*> inputs(n);
  for (int64_t m = 0; m < n; ++m) inputs[m] = gathered + m * shard;
  ReduceBuffers(call.dtype, call.op, inputs.data(), n, call.out, shard / DataTypeSize(call.dtype));
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
  CheckMpi(MPI_Alltoall(in, chunk, MPI_BYTE, call.out, chunk, MPI_BYTE, CommFor(call)),
           "MPI_Alltoall");
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
  MPI_Request requests[2];
  int num_requests = 0;
  if (source >= 0 && source != rank) {
    CheckMpi(MPI_Irecv(call.out, bytes, MPI_BYTE, static_cast<int>(source), kPermuteTag, world,
                       &requests[num_requests++]),
             "MPI_Irecv");
  }
  if (target >= 0 && target != rank) {
    CheckMpi(MPI_Isend(in, bytes, MPI_BYTE, static_cast<int>(target), kPermuteTag, world,
                       &requests[num_requests++]),
             "MPI_Isend");
  }
  CheckMpi(MPI_Waitall(num_requests, requests, MPI_STATUSES_IGNORE), "MPI_Waitall");
  if (source < 0) std::memset(call.out, 0, call.in_bytes);
  if (source == rank) std::memcpy(call.out, in, call.in_bytes);
}

MpiCommunicator::MpiCommunicator() : impl_(std::make_unique<Impl>()) {
  Topology::InitMpi();
  CheckMpi(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->world), "MPI_Comm_dup");
  // Errors come back as codes and become weft::Error with MPI's text.
  CheckMpi(MPI_Comm_set_errhandler(impl_->world, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  CheckMpi(MPI_Comm_rank(impl_->world, &impl_->rank), "MPI_Comm_rank");
  CheckMpi(MPI_Comm_size(impl_->world, &impl_->size), "MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& [groups, comm] : impl_->group_comms) MPI_Comm_free(&comm);
  if (impl_->world != MPI_COMM_NULL) MPI_Comm_free(&impl_->world);
}

int64_t MpiCommunicator::device_id() const { return impl_->rank; }
int64_t MpiCommunicator::num_devices() const { return impl_->size; }

void MpiCommunicator::DoCollective(const CollectiveCall& call) {
  switch (call.kind) {
    case CollectiveKind::kAllReduce:
      return impl_->AllReduce(call);
    case CollectiveKind::kAllGather:
    case CollectiveKind::kVerifyHash: {
      const int bytes = MessageBytes(call.in_bytes, call);
      MessageBytes(call.out_bytes, call);
      CheckMpi(
          MPI_Allgather(call.in, bytes, MPI_BYTE, call.out, bytes, MPI_BYTE, impl_->CommFor(call)),
          "MPI_Allgather");
      return;
    }
    case CollectiveKind::kReduceScatter:
      return impl_->ReduceScatter(call);
    case CollectiveKind::kAllToAll:
      return impl_->AllToAll(call);
    case CollectiveKind::kCollectivePermute:
      return impl_->Permute(call);
    case CollectiveKind::kBarrier:
      CheckMpi(MPI_Barrier(impl_->world), "MPI_Barrier");
      return;
  }
}

int RunMpiMain(const std::function<void(Communicator& comm)>& fn) {
  int rank = -1;
  // Outside the try: a failing rank aborts without first freeing
  // communicators, which could wait for ranks that are stuck elsewhere.
  std::unique_ptr<MpiCommunicator> comm;
  int code = 1;  // an internal failure; bad input (weft::Error) is 2, as in the CLI
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
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
  } catch (...) {
    std::fprintf(stderr, "rank %d: unknown exception\n", rank);
  }
  std::fflush(stderr);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace weft::runtime
