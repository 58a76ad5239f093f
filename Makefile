# The two commands of the quick start: `make run` and `make test`.
BUILD ?= build
ASAN_BUILD ?= build-asan
PY ?= /usr/bin/python3
JOBS ?= $(shell nproc)
export OMPI_ALLOW_RUN_AS_ROOT ?= 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM ?= 1

.PHONY: all setup build run test test-unit test-python test-asan test-fuzz bench clean

all: build

setup:
	@scripts/setup

# Unity builds (CMakeLists.txt): the first `make run` on 2 cores builds weft
# in about half the CPU time of a file-by-file build.
UNITY ?= ON

# The unit tests are built and run once, by the sanitizer build (test-asan);
# this build runs the rest (whole training runs and plans, MPI, the installed
# package, the style checks). UNIT_TESTS=ON builds them here too.
UNIT_TESTS ?= OFF

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_WERROR=ON -DPython_EXECUTABLE=$(PY) \
	  -DCMAKE_UNITY_BUILD=$(UNITY) -DWEFT_UNIT_TESTS=$(UNIT_TESTS)

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# The main job: a small Llama learns the King James Bible (configs/tiny.toml),
# fsdp=2 x tensor=2 on 4 in-process devices; writes runs/tiny/ (a second
# `make run` continues that run, or says it is complete). Builds only the
# weft executable; `make test` builds the rest.
run: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target weft
	$(BUILD)/apps/weft/weft train

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900
	PYTHONPATH=$(BUILD)/python $(PY) -m pytest -q python/tests
	$(MAKE) test-asan
	$(MAKE) -j $(JOBS) test-fuzz

# -g1: line tables, all a sanitizer report's stack needs (-g's full debug
# information took a tenth more compile time).
$(ASAN_BUILD)/build.ninja:
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
	  -DWEFT_SANITIZE=ON -DBUILD_SHARED_LIBS=ON -DWEFT_BUILD_PYTHON=OFF -DWEFT_BUILD_APPS=OFF \
	  -DPython_EXECUTABLE=$(PY) -DCMAKE_UNITY_BUILD=$(UNITY)

# The unit tests, under AddressSanitizer + UndefinedBehaviorSanitizer (the
# only build of make test that runs them).
test-asan: setup $(ASAN_BUILD)/build.ninja
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 1200 -L unit

# libFuzzer on the HLO text parser (clang; AddressSanitizer + UBSan), for a
# bounded number of runs and time. A crash, a sanitizer report or a
# print/parse round trip that is not a fixed point fails the run. The seed
# is fixed so that CI repeats the run a developer saw pass; explore more with
# `make test-fuzz FUZZ_SEED=0 FUZZ_RUNS=-1 FUZZ_SECONDS=600` and add what it
# finds to fuzz/corpus/hlo (the checked-in seeds and regressions).
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 120
FUZZ_RUNS ?= 100000
FUZZ_SEED ?= 1
FUZZ_FLAGS = -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -Iinclude
FUZZ_SRCS := fuzz/hlo_parser_fuzz.cc src/base/primitive_type.cc src/base/text_cursor.cc \
  src/base/data_files.cc src/base/env.cc src/base/memory.cc $(wildcard src/hlo/*.cc src/sharding/*.cc)
FUZZ_OBJS := $(patsubst %.cc,$(FUZZ_BUILD)/%.o,$(FUZZ_SRCS))

$(FUZZ_BUILD)/%.o: %.cc
	@mkdir -p $(dir $@)
	clang++ $(FUZZ_FLAGS) -c $< -o $@

$(FUZZ_BUILD)/hlo_parser_fuzz: $(FUZZ_OBJS)
	clang++ $(FUZZ_FLAGS) $^ -lfmt -o $@

# libFuzzer on the safetensors reader (fuzz/safetensors_fuzz.cc: the header
# length, the JSON header, the offsets, the tensors and the write-back round
# trip), seeds in fuzz/corpus/safetensors, at most ST_FUZZ_SECONDS.
# executor_tensor.cc (HostTensor) is built without coverage and in sections,
# so that --gc-sections drops the parts of it that reach into the executor's
# evaluators, which the reader never calls; everything else links as is.
ST_FUZZ_SECONDS ?= 60
ST_FUZZ_SRCS := fuzz/safetensors_fuzz.cc src/train/safetensors.cc src/base/atomic_file.cc \
  src/base/primitive_type.cc src/base/memory.cc src/hlo/shape.cc
ST_FUZZ_OBJS := $(patsubst %.cc,$(FUZZ_BUILD)/%.o,$(ST_FUZZ_SRCS)) \
  $(FUZZ_BUILD)/nocov/src/runtime/executor_tensor.o

$(FUZZ_BUILD)/nocov/%.o: %.cc
	@mkdir -p $(dir $@)
	clang++ -std=c++20 -O1 -g -fsanitize=address,undefined -ffunction-sections -fdata-sections \
	  -Iinclude -c $< -o $@

$(FUZZ_BUILD)/safetensors_fuzz: $(ST_FUZZ_OBJS)
	clang++ $(FUZZ_FLAGS) $^ -lfmt -Wl,--gc-sections -o $@

# libFuzzer on the run directory's readers (fuzz/run_dir_fuzz.cc: the
# checkpoint's state.json and the shard files it names, opened and loaded as a
# resume does, and metrics.jsonl), seeds in fuzz/corpus/run_dir, at most
# RD_FUZZ_SECONDS. It reuses the HLO and sharding objects above, and
# executor_tensor.cc and communicator.cc (the collective save, which a load
# never calls) built without coverage.
RD_FUZZ_SECONDS ?= 30
RD_FUZZ_SRCS := fuzz/run_dir_fuzz.cc src/train/checkpoint.cc src/train/checkpoint_shards.cc \
  src/train/run_dir.cc src/train/safetensors.cc src/base/atomic_file.cc src/base/crc32c.cc src/base/primitive_type.cc \
  src/base/text_cursor.cc src/base/data_files.cc src/base/env.cc src/base/memory.cc \
  $(wildcard src/hlo/*.cc src/sharding/*.cc)
RD_FUZZ_OBJS := $(patsubst %.cc,$(FUZZ_BUILD)/%.o,$(RD_FUZZ_SRCS)) \
  $(FUZZ_BUILD)/nocov/src/runtime/executor_tensor.o $(FUZZ_BUILD)/nocov/src/runtime/communicator.o

$(FUZZ_BUILD)/run_dir_fuzz: $(RD_FUZZ_OBJS)
	clang++ $(FUZZ_FLAGS) $^ -lfmt -Wl,--gc-sections -o $@

test-fuzz: setup $(FUZZ_BUILD)/hlo_parser_fuzz $(FUZZ_BUILD)/safetensors_fuzz $(FUZZ_BUILD)/run_dir_fuzz
	rm -rf $(FUZZ_BUILD)/corpus && mkdir -p $(FUZZ_BUILD)/corpus
	$(FUZZ_BUILD)/hlo_parser_fuzz -seed=$(FUZZ_SEED) -runs=$(FUZZ_RUNS) \
	  -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus fuzz/corpus/hlo
	rm -rf $(FUZZ_BUILD)/corpus-safetensors && mkdir -p $(FUZZ_BUILD)/corpus-safetensors
	$(FUZZ_BUILD)/safetensors_fuzz -seed=$(FUZZ_SEED) -runs=$(FUZZ_RUNS) \
	  -max_total_time=$(ST_FUZZ_SECONDS) -rss_limit_mb=2048 -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus-safetensors fuzz/corpus/safetensors
	rm -rf $(FUZZ_BUILD)/corpus-run-dir && mkdir -p $(FUZZ_BUILD)/corpus-run-dir
	$(FUZZ_BUILD)/run_dir_fuzz -seed=$(FUZZ_SEED) -runs=$(FUZZ_RUNS) \
	  -max_total_time=$(RD_FUZZ_SECONDS) -rss_limit_mb=2048 -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus-run-dir fuzz/corpus/run_dir

bench: build
	$(BUILD)/apps/weft/weft bench attention

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
