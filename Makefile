# Front door. `make run`: install, build, replay the shipped sample trace. `make test`: every test,
# then the same tests under AddressSanitizer+UBSan, then the threaded tests under ThreadSanitizer.
JOBS ?= $(shell nproc)
BUILD ?= build
CMAKE_FLAGS ?=
# A test that hangs fails with its name and output after this many seconds (the slowest takes ~30 s
# under TSan on a loaded 2-core machine) instead of holding CI to its limit; one that ran out of time
# is run once more (the log keeps both), so a rare stall on a loaded machine does not fail the run.
CTEST = ctest --output-on-failure -j $(JOBS) --timeout 300 --repeat after-timeout:2

.PHONY: all deps build run test test-fast test-asan test-tsan bench clean deb wheel

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/gpumem replay data/transformer_varlen.jsonl.gz

test-fast: build
	cd $(BUILD) && $(CTEST)

test-asan: deps
	@cmake -S . -B build-asan -DGPUMEM_SANITIZE=address,undefined -DGPUMEM_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && $(CTEST) -LE slow

test-tsan: deps
	@cmake -S . -B build-tsan -DGPUMEM_SANITIZE=thread -DGPUMEM_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build-tsan -j $(JOBS) --target tsan_tests
	cd build-tsan && $(CTEST) -L tsan

test: test-fast test-asan test-tsan

# Packages (packaging/): a .deb of the `cmake --install` tree (CPack), and a Python wheel.
deb: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target gpumem gpumem_shared gpumem_monitor_shared
	cd $(BUILD) && cpack -G DEB

wheel: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target wheel

bench: build
	bash scripts/bench.sh

clean:
	rm -rf build build-asan build-tsan
