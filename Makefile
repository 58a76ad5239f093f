# The two commands of the quick start: `make run` and `make test`.
BUILD ?= build
ASAN_BUILD ?= build-asan
PY ?= /usr/bin/python3
JOBS ?= $(shell nproc)
export OMPI_ALLOW_RUN_AS_ROOT ?= 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM ?= 1

.PHONY: all setup build run test test-unit test-python test-asan bench clean

all: build

setup:
	@scripts/setup

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(PY)

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# The main job. Until training lands it is the attention demo and benchmark.
run: build
	$(BUILD)/apps/weft/weft demo

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900
	PYTHONPATH=$(BUILD)/python $(PY) -m pytest -q python/tests
	$(MAKE) test-asan

$(ASAN_BUILD)/build.ninja:
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DWEFT_SANITIZE=ON \
	  -DWEFT_BUILD_PYTHON=OFF -DWEFT_BUILD_APPS=OFF -DPython_EXECUTABLE=$(PY)

# Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer.
test-asan: setup $(ASAN_BUILD)/build.ninja
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 1200 -L unit

bench: build
	$(BUILD)/apps/weft/weft bench attention

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
