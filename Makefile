# Entry points.  CMake does the real work; this file only strings the
# steps together.
#
#   make            build (Release) into build/
#   make test       install test dependencies, build, run ctest
#   make bench      install bench dependencies, build, run every workload
#                   under every allocator, quick mode (README.md says how
#                   long), with progress on stderr
#   make bench-full the same at full length (5 repetitions, longer runs)
#   make sanitize   ASan+UBSan and TSan builds (clang) with their test suites
#   make debug      a build with every internal assertion and the validity
#                   walker, running the stress, misuse and reliability tests
#   make fuzz       libFuzzer on the C API (clang, ASan+UBSan) for FUZZ_SECONDS
#   make platforms  the library and its test suite for every other target
#                   this machine runs: 32-bit x86 (natively, or under
#                   qemu-user on a kernel without 32-bit support) and
#                   aarch64 (under qemu-user) with the C++ layer, musl (natively,
#                   also statically linked; C only) and 64-bit Windows
#                   (MinGW-w64, the C API only, tests under wine), each in
#                   build-<platform>/
#   make check-macos  compile-check the macOS files and the core for arm64
#                   and x86_64 macOS with clang, against stand-in
#                   declarations (tests/darwin; there is no SDK here):
#                   nothing is linked or run
#   make install    build the libraries and install them with the header,
#                   pkg-config files and CMake package, the kamepool wrapper
#                   and the manual pages (PREFIX=/usr/local, DESTDIR honoured)
#   make clean      remove the build trees

# cmake --build runs make again below this one, which would announce
# every directory it enters.
MAKEFLAGS  += --no-print-directory

PREFIX     ?= /usr/local
DESTDIR    ?=
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
BUILD_TYPE ?= Release
# Scale of the stress tests under the sanitizers, which run them several
# times slower than a plain build.  Under a sanitizer the system allocator
# the pool falls back to is the sanitizer's: allocator_may_return_null=1
# keeps its answer to an impossible request a NULL, as C requires, rather
# than a report and exit.
SAN_SCALE  ?= 0.5
# Extra arguments for bench/run_bench.py, e.g. BENCH_ARGS="--workloads loop"
# or BENCH_ARGS="--ab old.so new.so"; results go to BENCH_OUT.
BENCH_ARGS ?=
BENCH_OUT  ?= build/bench-results
CTEST      ?= ctest --output-on-failure
# make fuzz: how long libFuzzer runs, and extra options for it
# (e.g. FUZZ_ARGS="-seed=1 -max_len=4096").  New inputs go to build-fuzz/work.
FUZZ_SECONDS ?= 180
FUZZ_ARGS    ?=

# make platforms: which targets, and the scale of the stress tests on each
# (KP_TEST_SCALE).  aarch64 runs under qemu-user, several times slower, and
# so does 32-bit x86 where the kernel cannot run it.
PLATFORMS ?= i686 musl aarch64 windows
PLATFORM_SCALE_i686    ?= 0.5
PLATFORM_SCALE_musl    ?= 1
PLATFORM_SCALE_aarch64 ?= 0.5
PLATFORM_SCALE_windows ?= 1
PLATFORM_TOOLCHAIN_i686    = cmake/toolchain-i686-linux-gnu.cmake
PLATFORM_TOOLCHAIN_musl    = cmake/toolchain-musl.cmake
PLATFORM_TOOLCHAIN_aarch64 = cmake/toolchain-aarch64-linux-gnu.cmake
PLATFORM_TOOLCHAIN_windows = cmake/toolchain-x86_64-w64-mingw32.cmake
# wine finds the DLLs a test needs (the pool's, winpthreads, libgcc) on
# WINEPATH; its configuration lives in the build tree, made before the
# tests run (two tests starting wine on a new one at once fail).
MINGW_GCC_DIR = $(dir $(shell x86_64-w64-mingw32-gcc-posix -print-libgcc-file-name))
PLATFORM_ENV_windows = WINEDEBUG=-all WINEPREFIX=$(CURDIR)/build-windows/wine \
    WINEPATH='$(CURDIR)/build-windows;/usr/x86_64-w64-mingw32/lib;$(MINGW_GCC_DIR)'
PLATFORM_PREPARE_windows = $(PLATFORM_ENV_windows) /usr/lib/wine/wine64 wineboot --init && \
    $(PLATFORM_ENV_windows) /usr/lib/wine/wineserver64 -w
# Once in a CI run a test under wine exited at once, printing nothing (its
# program never ran); the same test passed in every one of 46 runs here
# since, alone and beside the others.  A failing test under wine runs
# once more; its first failure stays in the log.
PLATFORM_CTEST_windows = --repeat until-pass:2
# The C++ layer where the target has a C++ compiler here (Debian's cross
# g++ for i686 and aarch64; musl-tools has no C++ runtime, and Windows
# has the C API only).  The tests that need this machine's own programs
# stay with the native suite.
PLATFORM_CXX_i686    = ON
PLATFORM_CXX_musl    = OFF
PLATFORM_CXX_aarch64 = ON
PLATFORM_CXX_windows = OFF
PLATFORM_CMAKE = -DCMAKE_BUILD_TYPE=Release -DKAME_POOL_NATIVE_TESTS=OFF -DKAME_POOL_BUILD_BENCH=OFF

CONFIGURE   = cmake -S . -B build -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCMAKE_INSTALL_PREFIX=$(PREFIX)

# The sanitizer runtimes come with clang (libclang-rt-14-dev).
SAN_CMAKE = -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
            -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKAME_POOL_OVERRIDE=OFF \
            -DKAME_POOL_BUILD_BENCH=OFF

.PHONY: all build test bench bench-full bench-build sanitize asan tsan debug fuzz install clean check-macos \
        platforms platform-deps $(addprefix platform-,$(PLATFORMS))

all: build

build:
	sh scripts/deps.sh build
	$(CONFIGURE)
	cmake --build build -j$(JOBS)

test:
	sh scripts/deps.sh test
	$(CONFIGURE)
	cmake --build build -j$(JOBS)
	cd build && $(CTEST)

bench-build:
	sh scripts/deps.sh bench
	$(CONFIGURE)
	cmake --build build -j$(JOBS)

bench: bench-build
	python3 bench/run_bench.py --lib build/libkamepoolalloc.so --bin-dir build/bench \
	    --out $(BENCH_OUT) $(BENCH_ARGS)

bench-full: bench-build
	python3 bench/run_bench.py --full --lib build/libkamepoolalloc.so --bin-dir build/bench \
	    --out $(BENCH_OUT) $(BENCH_ARGS)

sanitize: asan tsan

asan:
	sh scripts/deps.sh test
	cmake -S . -B build-asan $(SAN_CMAKE) -DKAME_POOL_SANITIZE=address,undefined
	cmake --build build-asan -j$(JOBS)
	cd build-asan && KP_TEST_SCALE=$(SAN_SCALE) \
	    ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
	    UBSAN_OPTIONS=print_stacktrace=1 $(CTEST)

tsan:
	sh scripts/deps.sh test
	cmake -S . -B build-tsan $(SAN_CMAKE) -DKAME_POOL_SANITIZE=thread
	cmake --build build-tsan -j$(JOBS)
	cd build-tsan && KP_TEST_SCALE=$(SAN_SCALE) \
	    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1 $(CTEST)

debug:
	sh scripts/deps.sh test
	cmake -S . -B build-debug -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKAME_POOL_DEBUG=2 \
	    -DKAME_POOL_BUILD_BENCH=OFF
	cmake --build build-debug -j$(JOBS)
	cd build-debug && KP_TEST_SCALE=$(SAN_SCALE) $(CTEST) \
	    -R 'test_(stress|thread_churn|fork|misuse|reliability|api|memory_return|units_claim)$$'

# The pool is built as for `make asan` and also instrumented for coverage;
# tests/fuzz/run_fuzz.sh runs the fuzzer from a copy of the committed corpus.
fuzz:
	sh scripts/deps.sh fuzz
	cmake -S . -B build-fuzz $(SAN_CMAKE) -DKAME_POOL_SANITIZE=address,undefined -DKAME_POOL_FUZZ=ON
	cmake --build build-fuzz -j$(JOBS) --target fuzz_api
	sh tests/fuzz/run_fuzz.sh build-fuzz/tests/fuzz/fuzz_api build-fuzz/work $(FUZZ_SECONDS) $(FUZZ_ARGS)

# Each platform builds and runs on its own; with -k one failing does not
# stop the others.
platforms: $(addprefix platform-,$(PLATFORMS))

platform-deps:
	sh scripts/deps.sh platforms

$(addprefix platform-,$(PLATFORMS)): platform-%: platform-deps
	cmake -S . -B build-$* -DCMAKE_TOOLCHAIN_FILE=$(PLATFORM_TOOLCHAIN_$*) $(PLATFORM_CMAKE) \
	    -DKAME_POOL_CXX=$(PLATFORM_CXX_$*)
	cmake --build build-$* -j$(JOBS)
	$(if $(PLATFORM_PREPARE_$*),$(PLATFORM_PREPARE_$*))
	cd build-$* && $(PLATFORM_ENV_$*) KP_TEST_SCALE=$(PLATFORM_SCALE_$*) $(CTEST) -j$(JOBS) $(PLATFORM_CTEST_$*)

check-macos:
	sh scripts/deps.sh check-macos
	sh tests/check_macos.sh $(CURDIR)/build-macos

# Builds only what it installs: the two libraries and the wrapper's
# report tool (the wrapper and manual pages are made by configuring).
install:
	sh scripts/deps.sh build
	$(CONFIGURE)
	cmake --build build -j$(JOBS) --target kamepoolalloc kamepoolalloc_static kamepool-tune
	DESTDIR=$(DESTDIR) cmake --install build --prefix $(PREFIX)

clean:
	rm -rf build build-asan build-tsan build-debug build-fuzz build-macos $(addprefix build-,$(PLATFORMS))
