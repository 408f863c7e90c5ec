#!/bin/sh
# Installs the build into a scratch prefix and builds a C++ program against
# it the two ways a user would: with the pkg-config file, and with the CMake
# package (its shared and its static target).  Each program uses the C++
# adaptors and the C API and must run; with the static target, operator new
# must be the executable's own (the library's, linked in).
#
#   sh tests/install_consumer.sh BUILD_DIR WORK_DIR
set -u
build=${1:?usage: install_consumer.sh BUILD_DIR WORK_DIR}
work=${2:?usage: install_consumer.sh BUILD_DIR WORK_DIR}
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
failed=0
fail() { echo "FAIL $1"; failed=$((failed + 1)); }
pass() { echo "PASS $1"; }

if ! cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1; then
  fail "cmake --install"
  cat "$work/install.log"
  exit 1
fi
for h in kame_pool.h kame/pool_allocator.hpp kame/aligned_allocator.hpp kame/pool_resource.hpp \
  kame/detail/allocate.hpp; do
  [ -f "$prefix/include/$h" ] || fail "installed header include/$h missing"
done
libdir=$(dirname "$(find "$prefix" -name libkamepoolalloc.so -print | head -n 1)")
pcdir=$(dirname "$(find "$prefix" -name kamepoolalloc.pc -print | head -n 1)")

cat >"$work/consumer.cpp" <<'CPP'
#include <kame_pool.h>
#include <kame/aligned_allocator.hpp>
#include <kame/pool_allocator.hpp>
#include <kame/pool_resource.hpp>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory_resource>
#include <vector>
int main() {
  std::map<int, int, std::less<int>, kame::pool_allocator<std::pair<const int, int>>> m;
  for (int i = 0; i < 1000; i++) m[i] = i * 2;
  std::vector<double, kame::aligned_allocator<double, 64>> v(100, 1.0);
  std::pmr::vector<int> p(1000, 3, kame::pool_memory_resource());
  void *page = kame_pool_malloc(4096);
  bool ok = m[999] == 1998 && reinterpret_cast<std::uintptr_t>(v.data()) % 64 == 0 && p[999] == 3 &&
            kame_pool_malloc_usable_size(page) == 4096;
  kame_pool_free(page);
  std::printf("consumer %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
CPP

# pkg-config
if command -v pkg-config >/dev/null 2>&1; then
  # The .pc names the configured prefix; --define-prefix takes the scratch one.
  flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --define-prefix --cflags --libs kamepoolalloc)
  # shellcheck disable=SC2086 # the flags are a list
  if g++ -std=c++17 -Wall -Wextra -Werror "$work/consumer.cpp" -o "$work/consumer_pc" $flags \
    -Wl,-rpath,"$libdir" >"$work/pc.log" 2>&1 && "$work/consumer_pc"; then
    pass "pkg-config: g++ \$(pkg-config --cflags --libs kamepoolalloc)"
  else
    fail "pkg-config build or run"
    cat "$work/pc.log"
  fi
else
  fail "pkg-config is not installed (apt-get install pkg-config)"
fi

# CMake package
mkdir -p "$work/cm"
cp "$work/consumer.cpp" "$work/cm/consumer.cpp"
cat >"$work/cm/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(consumer CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(kamepoolalloc REQUIRED)
add_executable(consumer_shared consumer.cpp)
target_link_libraries(consumer_shared PRIVATE kamepoolalloc::kamepoolalloc)
add_executable(consumer_static consumer.cpp)
target_link_libraries(consumer_static PRIVATE kamepoolalloc::kamepoolalloc_static)
CMAKE
if cmake -S "$work/cm" -B "$work/cm/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_RPATH="$libdir" \
  >"$work/cm.log" 2>&1 && cmake --build "$work/cm/build" >>"$work/cm.log" 2>&1; then
  for t in shared static; do
    if "$work/cm/build/consumer_$t"; then
      pass "CMake package: kamepoolalloc::kamepoolalloc$([ $t = static ] && echo _static)"
    else
      fail "CMake package: consumer_$t did not run"
    fi
  done
  if nm -D --defined-only "$libdir/libkamepoolalloc.so" | grep -q ' _Znwm$'; then
    # The library replaces operator new: statically linked, the program's
    # operator new is the library's, inside the executable.
    if nm --defined-only "$work/cm/build/consumer_static" | grep -q ' _Znwm$'; then
      pass "static target: operator new linked into the executable"
    else
      fail "static target: operator new is not in the executable"
    fi
  fi
else
  fail "CMake package: configure or build"
  tail -30 "$work/cm.log"
fi

[ $failed -eq 0 ] && echo "install_consumer: all passed" && exit 0
exit 1
