#!/bin/sh
# The macOS compile check: every source of the library for macOS (the
# core, os_macos.c, sys_alloc_macos.c, override_macos.c) compiled by clang
# for arm64 and x86_64 macOS, warnings as errors, against the stand-in
# declarations of tests/darwin/include, not the SDK (there is none here;
# tests/darwin/README.md says what that does and does not check).
# Then the interpose table in the object: one pair per replaced function,
# each naming the system's function it replaces; and CMakeLists.txt's
# macOS configuration.  Nothing is linked or run.
#
#   sh tests/check_macos.sh [output-dir]
set -eu
export LC_ALL=C

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build-macos}
CLANG=${CLANG:-clang}
OBJDUMP=${OBJDUMP:-llvm-objdump}
NM=${NM:-llvm-nm}
for c in "$CLANG" "$OBJDUMP" "$NM"; do
  command -v "$c" >/dev/null 2>&1 || { echo "check_macos: $c not found (clang, llvm)" >&2; exit 1; }
done

# The core's sources as CMakeLists.txt lists them, for KP_OS=macos.
sources=$(sed -n '/^set(KP_SOURCES$/,/^)$/p' "$root/CMakeLists.txt" | grep '^ *src/' |
  sed 's/^ *//; s/\${KP_OS}/macos/')
sources="$sources src/os_posix.c src/override_macos.c"
[ -n "$sources" ] || { echo "check_macos: no sources found in CMakeLists.txt" >&2; exit 1; }

# As CMakeLists.txt compiles them (kp_objects), with -nostdlibinc so that
# no header of this machine's C library is seen: clang's own (stddef.h,
# stdint.h, stdatomic.h, ...) and the stand-ins only.
flags="-std=gnu11 -O2 -fPIC -Wall -Wextra -Werror -fvisibility=hidden -nostdlibinc
  -isystem $root/tests/darwin/include -I$root/include -I$root/src
  -fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc -fno-builtin-free
  -D_GNU_SOURCE -DKAME_POOL_BUILD -DKP_OVERRIDE=1"

status=0
for target in arm64-apple-macos11 x86_64-apple-macos11; do
  for debug in 0 2; do
    dir=$out/$target-debug$debug
    mkdir -p "$dir"
    n=0
    for src in $sources; do
      # shellcheck disable=SC2086 # the flags are meant to split
      if ! "$CLANG" -target $target $flags -DKP_DEBUG=$debug -c "$root/$src" \
          -o "$dir/$(basename "$src" .c).o"; then
        echo "FAIL $target KP_DEBUG=$debug: $src"
        status=1
      else
        n=$((n + 1))
      fi
    done
    echo "check_macos: $target KP_DEBUG=$debug: $n sources compiled"
  done

  obj=$out/$target-debug0/override_macos.o
  [ -f "$obj" ] || continue
  # The section exists, and holds two pointers per replaced function.
  size=$("$OBJDUMP" --section-headers "$obj" | awk '$2 == "__interpose" { print $3 }')
  replaced="malloc free calloc realloc reallocf valloc posix_memalign aligned_alloc
    malloc_size malloc_good_size malloc_zone_free malloc_zone_realloc malloc_zone_from_ptr"
  count=$(echo $replaced | wc -w)
  if [ -z "$size" ]; then
    echo "FAIL $target: no __DATA,__interpose section in override_macos.o"
    status=1
  elif [ $((0x$size)) -ne $((count * 16)) ]; then
    echo "FAIL $target: __interpose holds $((0x$size)) bytes, want $((count * 16)) ($count pairs)"
    status=1
  fi
  # Each replacee is an undefined symbol (the system's), referenced from
  # the table.
  relocs=$("$OBJDUMP" -r --section=__interpose "$obj")
  for f in $replaced; do
    if ! "$NM" -u "$obj" | grep -qx "_$f"; then
      echo "FAIL $target: _$f is not an undefined reference of override_macos.o"
      status=1
    elif ! echo "$relocs" | grep -qw "_$f"; then
      echo "FAIL $target: the interpose table does not name _$f"
      status=1
    fi
  done
  # The replacements are not exported (the table alone refers to them).
  if "$NM" -g --defined-only "$obj" | grep -q .; then
    echo "FAIL $target: override_macos.o defines global symbols:"
    "$NM" -g --defined-only "$obj"
    status=1
  fi
done
# CMakeLists.txt's macOS wiring: configured for arm64 macOS (the C
# library; the compiler checks build static libraries, not programs) and
# the library's objects built, warning-free.
if command -v "${CMAKE:-cmake}" >/dev/null 2>&1; then
  rm -rf "$out/cmake"
  if ! "${CMAKE:-cmake}" -S "$root" -B "$out/cmake" -DCMAKE_TOOLCHAIN_FILE="$root/tests/darwin/toolchain-macos-check.cmake" \
      -DKAME_POOL_CXX=OFF -DKAME_POOL_NATIVE_TESTS=OFF -DKAME_POOL_BUILD_TESTS=OFF -DKAME_POOL_BUILD_BENCH=OFF \
      >"$out/cmake.log" 2>&1; then
    echo "FAIL cmake configure for macOS ($out/cmake.log)"
    status=1
  elif ! "${CMAKE:-cmake}" --build "$out/cmake" --target kp_objects >>"$out/cmake.log" 2>&1; then
    echo "FAIL cmake build of kp_objects for macOS ($out/cmake.log)"
    status=1
  elif grep -q 'warning:' "$out/cmake.log"; then
    echo "FAIL warnings in the cmake build for macOS:"
    grep 'warning:' "$out/cmake.log"
    status=1
  elif ! grep -q 'override_macos.c' "$out/cmake.log"; then
    echo "FAIL the cmake build for macOS did not compile override_macos.c"
    status=1
  else
    echo "check_macos: cmake for arm64 macOS configured, kp_objects built"
  fi
fi
[ $status -eq 0 ] && echo "check_macos: passed (compiled against stand-in declarations; not linked, not run)"
exit $status
