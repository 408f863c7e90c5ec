#!/bin/sh
# Checks what a make target needs and, as root on Debian, installs what is
# missing.  Usage: scripts/deps.sh build|test|bench|fuzz|platforms|check-macos
#
# The project's machines are rebuilt from nothing, so everything the build,
# the tests and the benchmarks use must be installable from here.
set -eu

target=${1:-}

build_pkgs="cmake make gcc g++ binutils"
# clang and its sanitizer runtimes build the ASan/UBSan/TSan variants;
# python3, sqlite3, git and gcc are the real programs run under LD_PRELOAD;
# spin checks the models of the lock-free protocols; gnuplot draws the
# benchmark charts, which the benchmark runner's test checks; pkg-config
# builds programs against an install as README.md tells users to; the C++
# adaptors' tests use Eigen's headers; valgrind (with its headers,
# valgrind/memcheck.h) runs the memcheck tests of the pool's block
# announcements.
test_pkgs="$build_pkgs python3 sqlite3 git clang libclang-rt-14-dev file spin gnuplot-nox
  libeigen3-dev pkg-config valgrind"
# The benchmark runs the same real programs as the tests and draws its
# charts with gnuplot.
bench_pkgs="$build_pkgs python3 sqlite3 gnuplot-nox"
# The fuzz target is built with clang's -fsanitize=fuzzer; on Debian 12 the
# libFuzzer runtime (libclang_rt.fuzzer) ships in libclang-rt-14-dev, and
# libFuzzer, being C++, links against libstdc++ (from g++).
fuzz_pkgs="$build_pkgs clang libclang-rt-14-dev"
# make platforms: the C and C++ compilers for 32-bit x86 and aarch64 with
# their C libraries (a recommendation only, so named), musl's gcc wrapper and
# libc, qemu-user to run aarch64 programs (and 32-bit x86 ones where the kernel has no 32-bit support), MinGW-w64's gcc (the variant
# with winpthreads) and wine to run Windows programs.  Debian's gcc-multilib is
# not used: on Debian 12 it conflicts with the cross compilers.  python3
# checks the fuzz corpus in each build.
platform_pkgs="$build_pkgs python3 gcc-i686-linux-gnu g++-i686-linux-gnu libc6-dev-i386-cross musl-tools
  gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static
  gcc-mingw-w64-x86-64-posix wine64"
# make check-macos: clang compiles for macOS (no SDK needed for objects),
# llvm's objdump and nm read the Mach-O objects.
macos_pkgs="cmake make clang llvm"
# Peer allocators the benchmark compares against (LD_PRELOAD targets).
peer_pkgs="libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4"

case $target in
  build) need=$build_pkgs; optional= ;;
  test)  need=$test_pkgs; optional= ;;
  bench) need=$bench_pkgs; optional=$peer_pkgs ;;
  fuzz)  need=$fuzz_pkgs; optional= ;;
  platforms) need=$platform_pkgs; optional= ;;
  check-macos) need=$macos_pkgs; optional= ;;
  *) echo "usage: $0 build|test|bench|fuzz|platforms|check-macos" >&2; exit 2 ;;
esac

have_dpkg() { command -v dpkg-query >/dev/null 2>&1; }

installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

missing_of() {
  out=
  for p in "$@"; do
    installed "$p" || out="$out $p"
  done
  echo "${out# }"
}

is_root() { [ "$(id -u)" = 0 ]; }

updated=no
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if [ $updated = no ]; then
    apt-get update -q || return 1
    updated=yes
  fi
  # shellcheck disable=SC2086 # the package list is meant to split
  apt-get install -y -q --no-install-recommends "$@"
}

if ! have_dpkg; then
  # Not Debian: all we can do is check that the tools are on PATH.
  bad=
  for c in cmake make cc; do
    command -v $c >/dev/null 2>&1 || bad="$bad $c"
  done
  if [ -n "$bad" ]; then
    echo "deps.sh: missing commands:$bad (install them with your package manager)" >&2
    exit 1
  fi
  echo "deps.sh: not a Debian system; package checks skipped"
  exit 0
fi

# shellcheck disable=SC2086
missing=$(missing_of $need)
if [ -n "$missing" ]; then
  if ! is_root; then
    echo "deps.sh: $target needs packages that are not installed: $missing" >&2
    echo "deps.sh: install them with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends $missing" >&2
    exit 1
  fi
  echo "deps.sh: installing $missing"
  # shellcheck disable=SC2086
  if ! apt_install $missing; then
    echo "deps.sh: apt-get install failed for: $missing" >&2
    exit 1
  fi
  # shellcheck disable=SC2086
  still=$(missing_of $missing)
  if [ -n "$still" ]; then
    echo "deps.sh: still missing after apt-get: $still" >&2
    exit 1
  fi
fi

if [ -n "$optional" ]; then
  # shellcheck disable=SC2086
  omissing=$(missing_of $optional)
  if [ -n "$omissing" ]; then
    # A missing peer only drops a column from the benchmark table.
    if is_root; then
      # One at a time, so that one unavailable package does not keep
      # the others out.
      for p in $omissing; do
        echo "deps.sh: installing optional $p"
        apt_install "$p" || echo "deps.sh: could not install $p; continuing without it" >&2
      done
    else
      echo "deps.sh: optional packages missing: $omissing" >&2
      echo "  sudo apt-get install -y --no-install-recommends $omissing" >&2
    fi
  fi
fi

echo "deps.sh: $target dependencies present"
