#!/bin/sh
# The C++ adaptors (include/kame/) under each C++ compiler installed: builds
# tests/test_adaptors.cpp with g++ and with clang++, in C++17 and C++20,
# warning-free (-Wall -Wextra -Werror), and runs each program; then
# compiles the headers alone without exceptions and without RTTI.
#
#   sh tests/cxx_compilers.sh SOURCE_DIR path/to/libkamepoolalloc.so WORK_DIR
#
# Exit status: 0 all passed, 1 a build or a run failed, 77 neither
# compiler is installed.
set -u
src=${1:?usage: cxx_compilers.sh SOURCE_DIR LIBRARY WORK_DIR}
lib=${2:?usage: cxx_compilers.sh SOURCE_DIR LIBRARY WORK_DIR}
work=${3:?usage: cxx_compilers.sh SOURCE_DIR LIBRARY WORK_DIR}
libdir=$(cd "$(dirname "$lib")" && pwd)
mkdir -p "$work"

extra=
for d in /usr/include/eigen3 /usr/local/include/eigen3; do
  if [ -f "$d/Eigen/Dense" ]; then
    extra="-isystem $d -DKP_HAVE_EIGEN=1"
    break
  fi
done

passed=0
failed=0
ran=0
for cxx in g++ clang++; do
  if ! command -v "$cxx" >/dev/null 2>&1; then
    echo "SKIP $cxx: not installed"
    continue
  fi
  ran=1
  for std in c++17 c++20; do
    name="$cxx -std=$std"
    exe="$work/test_adaptors.$cxx.$std"
    # shellcheck disable=SC2086 # $extra is a list of flags
    if ! "$cxx" -std=$std -O1 -g -Wall -Wextra -Werror -D_GNU_SOURCE -I"$src/include" -I"$src/tests" \
      $extra "$src/tests/test_adaptors.cpp" -o "$exe" -L"$libdir" -Wl,-rpath,"$libdir" \
      -lkamepoolalloc -pthread >"$exe.log" 2>&1; then
      echo "FAIL $name: does not compile"
      head -40 "$exe.log" | sed 's/^/    /'
      failed=$((failed + 1))
      continue
    fi
    if "$exe" >"$exe.out" 2>&1; then
      echo "PASS $name: $(tail -n 1 "$exe.out")"
      passed=$((passed + 1))
    else
      echo "FAIL $name: the program failed"
      grep -v '^ok ' "$exe.out" | tail -20 | sed 's/^/    /'
      failed=$((failed + 1))
    fi
  done
  # The headers must not need exceptions or RTTI.
  printf '%s\n' '#include <kame/aligned_allocator.hpp>' '#include <kame/pool_allocator.hpp>' \
    '#include <kame/pool_resource.hpp>' '#include <vector>' '#include <memory_resource>' \
    'int main() { std::vector<int, kame::pool_allocator<int>> v(3);' \
    '  std::vector<float, kame::aligned_allocator<float, 32>> f(5);' \
    '  std::pmr::vector<int> p(4, 1, kame::pool_memory_resource());' \
    '  return (int)(v.size() + f.size() + p.size()) - 12; }' >"$work/bare.cpp"
  if "$cxx" -std=c++17 -Wall -Wextra -Werror -fno-exceptions -fno-rtti -I"$src/include" "$work/bare.cpp" \
    -o "$work/bare.$cxx" -L"$libdir" -Wl,-rpath,"$libdir" -lkamepoolalloc >"$work/bare.$cxx.log" 2>&1 &&
    "$work/bare.$cxx"; then
    echo "PASS $cxx -fno-exceptions -fno-rtti: the headers build and work"
    passed=$((passed + 1))
  else
    echo "FAIL $cxx -fno-exceptions -fno-rtti"
    head -20 "$work/bare.$cxx.log" | sed 's/^/    /'
    failed=$((failed + 1))
  fi
done

echo "$passed passed, $failed failed"
[ $failed -ne 0 ] && exit 1
[ $ran -eq 0 ] && exit 77
exit 0
