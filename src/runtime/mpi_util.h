// Internal: the MPI header, error checking, and the bounded waits shared by
// the MPI code paths.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "weft/base/error.h"

namespace weft::runtime {

// The text MPI gives for an error code.
inline std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "unknown MPI error";
  return std::string(text, length);
}

// Throws weft::Error naming the failed MPI call.
inline void CheckMpi(int code, const char* call) {
  if (code != MPI_SUCCESS) Fail("MPI call {} failed: {}", call, MpiErrorText(code));
}

// "2 s" or "300 ms".
inline std::string FormatTimeout(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return fmt::format("{} s", d.count() / 1000);
  return fmt::format("{} ms", d.count());
}

// What to do about a collective timeout, for the end of its message.
inline constexpr const char* kTimeoutAdvice =
    "A rank that does not arrive is stopped, hung, deadlocked, or far slower than the others; if "
    "it is only slow, raise the timeout (WEFT_COLLECTIVE_TIMEOUT=<seconds> or "
    "--collective-timeout <seconds>)";

// An all-gather by point-to-point messages, so that a missing rank can be
// named: every rank of `comm` sends `bytes` bytes to every other rank (tag
// `tag`) and receives theirs into `recv` (rank r's at r * bytes; its own is
// copied). Waits at most `timeout`; then throws weft::Error naming `what` and
// the ranks whose message did not come.
inline void AllGatherPointToPoint(MPI_Comm comm, int tag, const void* send, int bytes, void* recv,
                                  std::chrono::milliseconds timeout, const std::string& what) {
  int rank = 0, size = 1;
  CheckMpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  CheckMpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  char* out = static_cast<char*>(recv);
  std::copy_n(static_cast<const char*>(send), bytes, out + static_cast<size_t>(rank) * bytes);
  std::vector<MPI_Request> recvs(size, MPI_REQUEST_NULL), sends(size, MPI_REQUEST_NULL);
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    CheckMpi(
        MPI_Irecv(out + static_cast<size_t>(r) * bytes, bytes, MPI_BYTE, r, tag, comm, &recvs[r]),
        "MPI_Irecv");
    CheckMpi(MPI_Isend(send, bytes, MPI_BYTE, r, tag, comm, &sends[r]), "MPI_Isend");
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int64_t spins = 0;; ++spins) {
    int done = 0;
    CheckMpi(MPI_Testall(size, recvs.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (done) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::vector<int> missing, present;
      for (int r = 0; r < size; ++r) {
        int arrived = 1;
        if (recvs[r] != MPI_REQUEST_NULL)
          CheckMpi(MPI_Test(&recvs[r], &arrived, MPI_STATUS_IGNORE), "MPI_Test");
        (arrived ? present : missing).push_back(r);
      }
      if (!missing.empty()) {
        // No late message may write into `recv` after this returns.
        for (int r : missing) {
          MPI_Cancel(&recvs[r]);
          MPI_Wait(&recvs[r], MPI_STATUS_IGNORE);
        }
        for (MPI_Request& send_request : sends) {
          if (send_request != MPI_REQUEST_NULL) MPI_Request_free(&send_request);
        }
        Fail(
            "collective timeout: rank{} {} did not arrive at {} within {} while rank{} {} waited "
            "there. {}",
            missing.size() == 1 ? "" : "s", fmt::join(missing, ","), what, FormatTimeout(timeout),
            present.size() == 1 ? "" : "s", fmt::join(present, ","), kTimeoutAdvice);
      }
    }
    if (spins > 1000) std::this_thread::yield();
  }
  // Every rank has received from every other, so every send has been matched.
  CheckMpi(MPI_Waitall(size, sends.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
}

}  // namespace weft::runtime
