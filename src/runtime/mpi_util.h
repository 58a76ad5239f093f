// Internal: the MPI header and error checking shared by the MPI code paths.
#pragma once

#include <mpi.h>

#include <string>

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

}  // namespace weft::runtime
