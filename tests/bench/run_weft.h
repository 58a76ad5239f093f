// Runs the weft binary (WEFT_BINARY) for the tests of `weft bench …`.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace weft::testing {

struct Output {
  int exit_code = -1;
  std::string out, err;
};

// Runs `weft <args>`, capturing stdout and stderr apart.
inline Output RunWeft(const std::string& args) {
  const std::filesystem::path err_file = std::filesystem::temp_directory_path() /
                                         ("weft_bench_test_" + std::to_string(::getpid()) + ".err");
  const std::string command =
      std::string("'") + WEFT_BINARY + "' " + args + " 2> '" + err_file.string() + "'";
  Output o;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return o;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) o.out.append(buffer, n);
  const int status = pclose(pipe);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_file);
  std::stringstream text;
  text << err.rdbuf();
  o.err = text.str();
  std::filesystem::remove(err_file);
  return o;
}

}  // namespace weft::testing
