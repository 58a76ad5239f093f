#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include "weft/train/program.h"
#include "weft/autodiff/grad.h"
using namespace weft;
int main(int argc, char** argv) {
  std::string cfg = argv[1];
  RunConfig c = LoadRunConfig(cfg);
  c.mesh = ParseMeshFlag(argv[2]);
  StepProgramOptions o;
  o.batch_size = std::atoll(argv[3]);
  o.seq_len = std::atoll(argv[4]);
  o.remat = std::string(argv[5]) == "full" ? ScanRemat::kFull : ScanRemat::kNone;
  o.shard_as = argc < 8;
  auto t0 = std::chrono::steady_clock::now();
  StepProgram p = BuildStepProgram(c, o);
  auto t1 = std::chrono::steady_clock::now();
  std::fprintf(stderr, "build %.3f s\n", std::chrono::duration<double>(t1 - t0).count());
  std::ofstream(std::string(argv[6]) + ".global.hlo") << p.step->ToString();
  std::ofstream(std::string(argv[6]) + ".local.hlo") << p.compiled.program->ToString();
  for (size_t i = 0; i < p.compiled.input_names.size(); ++i)
    std::cout << "in " << p.compiled.input_names[i] << " " << p.compiled.input_shapes[i].ToString() << " " << p.compiled.local_input_shapes[i].ToString() << "\n";
  for (size_t i = 0; i < p.compiled.output_names.size(); ++i)
    std::cout << "out " << p.compiled.output_names[i] << " " << p.compiled.output_shapes[i].ToString() << "\n";
}
