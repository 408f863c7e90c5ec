#!/bin/sh
# Builds programs against a fresh install of the library, the ways
# README.md tells users to, and checks that the pool serves their memory.
#
#   sh tests/link_consumers.sh cmake     BUILD_DIR CC CXX
#   sh tests/link_consumers.sh pkgconfig BUILD_DIR CC CXX
#
# The library is installed from BUILD_DIR into a temporary prefix, which
# is also what a prefix outside the system directories looks like.  The
# programs (tests/consumer/) allocate only through strdup or through new
# and the standard containers, and name no allocator function: linked with
# the static library, they get the pool only if the link pulls the
# override in by itself.  Each prints "pool" or "system"; built without
# the library, each must print "system", which shows the check can tell.
#
# cmake: find_package, the static and the shared target.
# pkgconfig: kamepoolalloc-static (the archive in a dynamic program),
# `--static` with -static (a fully static program), and the shared
# library, whose program must start with no LD_LIBRARY_PATH (and whose
# flags for a prefix of /usr must carry no rpath).
#
# Both also link an empty program with the static library and check that
# every object of the override came with it: the anchors
# (KP_OVERRIDE_ANCHORS in CMakeLists.txt) must name one symbol of each.
#
# Exit status: 0 passed, 1 a check failed, 77 a tool is missing.
set -u
export LC_ALL=C
unset LD_PRELOAD LD_LIBRARY_PATH

route=${1:?usage: link_consumers.sh cmake|pkgconfig BUILD_DIR CC CXX}
build=${2:?build dir}
cc=${3:?C compiler}
cxx=${4:?C++ compiler}
here=$(cd "$(dirname "$0")" && pwd)
src=$here/consumer
cmake=${CMAKE:-cmake}

need() {
  for tool in "$@"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "SKIP: '$tool' not found (Debian: scripts/deps.sh test installs it)"
      exit 77
    fi
  done
}
need "$cmake" nm readelf
[ "$route" = pkgconfig ] && need pkg-config

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kp-link.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
prefix=$tmp/prefix
failed=0

pass() { echo "PASS $1"; }
fail() {
  failed=$((failed + 1))
  echo "FAIL $1"
}

# run NAME EXE EXPECT: EXE must start and print EXPECT ("pool"/"system").
run() {
  if [ ! -x "$2" ]; then
    fail "$1: not built"
    return
  fi
  out=$("$2" 2>&1)
  st=$?
  case "$st:$out" in
    "0:$3 "*) pass "$1: $out" ;;
    *) fail "$1: exit $st, expected '$3': $out" ;;
  esac
}

# needed EXE: the shared libraries EXE names (DT_NEEDED).
needed() { readelf -dW "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

# no_shared_lib NAME EXE: the archive, not the shared library, was linked.
no_shared_lib() {
  if needed "$2" | grep -q kamepoolalloc; then
    fail "$1: links libkamepoolalloc.so, not the archive"
  fi
}

# The default-visibility symbols the archive's members define, other than
# the kame_pool_* API: the override.
archive=
override_symbols() {
  readelf -sW "$archive" |
    awk '($5 == "GLOBAL" || $5 == "WEAK") && $6 == "DEFAULT" && $7 != "UND" &&
         $8 !~ /^kame_pool_/ && $8 !~ /^_Z/ { print $8 }' | sort -u
}

# whole_override NAME EXE: EXE, a C program that calls nothing, holds every
# override symbol of the archive.  The C++ operators are left out: they
# are one object of their own, anchored for C++ links only, and uses_new
# checks that a C++ program gets them.
whole_override() {
  if [ ! -x "$2" ]; then
    fail "$1: not built"
    return
  fi
  nm --defined-only "$2" | awk '{ print $3 }' | sort -u >"$tmp/defined"
  override_symbols >"$tmp/override"
  if [ ! -s "$tmp/override" ]; then
    fail "$1: no override symbol found in $archive"
    return
  fi
  missing=$(comm -23 "$tmp/override" "$tmp/defined" | tr '\n' ' ')
  if [ -z "$missing" ]; then
    pass "$1: all $(wc -l <"$tmp/override") override symbols linked"
  else
    fail "$1: not linked: $missing(give their object an anchor in KP_OVERRIDE_ANCHORS)"
  fi
}

echo "installing $build into $prefix"
if ! "$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
  cat "$tmp/install.log"
  fail "cmake --install"
  exit 1
fi
archive=$(find "$prefix" -name libkamepoolalloc.a | head -n 1)
if [ -z "$archive" ]; then
  fail "libkamepoolalloc.a not installed"
  exit 1
fi

case $route in
  cmake)
    cb=$tmp/consumer
    if ! "$cmake" -S "$src" -B "$cb" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" >"$tmp/configure.log" 2>&1 ||
      ! "$cmake" --build "$cb" >"$tmp/build.log" 2>&1; then
      tail -n 30 "$tmp/configure.log" "$tmp/build.log" 2>/dev/null
      fail "the consumer project does not build"
      exit 1
    fi
    for prog in uses_strdup uses_new; do
      run "$prog without the library" "$cb/${prog}_plain" system
      run "$prog, kamepoolalloc::kamepoolalloc_static" "$cb/${prog}_static" pool
      no_shared_lib "$prog, kamepoolalloc::kamepoolalloc_static" "$cb/${prog}_static"
      run "$prog, kamepoolalloc::kamepoolalloc" "$cb/${prog}_shared" pool
    done
    whole_override "empty program, kamepoolalloc::kamepoolalloc_static" "$cb/empty_static"
    ;;
  pkgconfig)
    pcdir=$(dirname "$(find "$prefix" -name kamepoolalloc.pc | head -n 1)")
    export PKG_CONFIG_PATH=$pcdir
    unset PKG_CONFIG_LIBDIR
    pc() { pkg-config "$@"; }
    if ! pc --exists kamepoolalloc kamepoolalloc-static; then
      fail "pkg-config does not find kamepoolalloc and kamepoolalloc-static in $pcdir"
      exit 1
    fi
    # build NAME COMPILER SOURCE FLAGS...: compiles and links as README.md says.
    build_one() {
      name=$1 compiler=$2 source=$3
      shift 3
      # shellcheck disable=SC2068 # the flags are meant to split
      if ! "$compiler" -o "$tmp/$name" "$src/$source" $@ >"$tmp/$name.log" 2>&1; then
        sed 's/^/    /' "$tmp/$name.log" | tail -n 10
        fail "$name: does not link: $compiler $source $*"
      fi
    }
    static_flags=$(pc --cflags --libs kamepoolalloc-static)
    full_static_flags=$(pc --static --cflags --libs kamepoolalloc)
    shared_flags=$(pc --cflags --libs kamepoolalloc)
    echo "kamepoolalloc-static: $static_flags"
    echo "kamepoolalloc --static: $full_static_flags"
    echo "kamepoolalloc: $shared_flags"
    for prog in uses_strdup uses_new; do
      if [ $prog = uses_strdup ]; then comp=$cc src_file=uses_strdup.c; else comp=$cxx src_file=uses_new.cpp; fi
      build_one ${prog}_plain "$comp" $src_file
      run "$prog without the library" "$tmp/${prog}_plain" system

      build_one ${prog}_static "$comp" $src_file "$static_flags"
      run "$prog, pkg-config kamepoolalloc-static" "$tmp/${prog}_static" pool
      no_shared_lib "$prog, pkg-config kamepoolalloc-static" "$tmp/${prog}_static"

      # A fully static link needs the C (and C++) library's archives, which
      # Debian's compilers bring (libc6-dev, libstdc++-12-dev).
      if "$comp" -static -o "$tmp/${prog}_static_probe" "$src/$src_file" >/dev/null 2>&1; then
        build_one ${prog}_full_static "$comp" $src_file -static "$full_static_flags"
        run "$prog, -static, pkg-config --static kamepoolalloc" "$tmp/${prog}_full_static" pool
        if [ -x "$tmp/${prog}_full_static" ] && [ -n "$(needed "$tmp/${prog}_full_static")" ]; then
          fail "$prog, -static: the program still needs shared libraries"
        fi
      else
        echo "SKIP $prog, -static: $comp cannot link a static program here (no libc.a?)"
      fi

      build_one ${prog}_shared "$comp" $src_file "$shared_flags"
      run "$prog, pkg-config kamepoolalloc (shared, prefix $prefix)" "$tmp/${prog}_shared" pool
      if [ -x "$tmp/${prog}_shared" ] && ! needed "$tmp/${prog}_shared" | grep -q '^libkamepoolalloc\.so'; then
        fail "$prog, pkg-config kamepoolalloc: libkamepoolalloc.so is not linked"
      fi
    done
    # Installed to /usr, where the loader looks by itself, the shared
    # library's flags carry no rpath.
    if "$cmake" -DCMAKE_INSTALL_PREFIX=/usr -DKP_PC_VERSION=0 -DKP_PC_LIBDIR=lib \
      -DKP_PC_INCLUDEDIR=include -DKP_PC_ANCHORS=" -Wl,-u,malloc" -DKP_PC_ARCH= \
      -DKP_PC_SOURCE_DIR="$here/../cmake" -DKP_PC_OUT_DIR="$tmp/pc-usr" \
      -P "$here/../cmake/pkgconfig.cmake" >"$tmp/pc-usr.log" 2>&1 &&
      grep -q '^Libs: -L${libdir} -Wl,--push-state,--no-as-needed -lkamepoolalloc -Wl,--pop-state$' \
        "$tmp/pc-usr/kamepoolalloc.pc"; then
      pass "kamepoolalloc.pc for prefix /usr: no rpath"
    else
      fail "kamepoolalloc.pc for prefix /usr:"
      cat "$tmp/pc-usr.log" "$tmp/pc-usr/kamepoolalloc.pc" 2>/dev/null | sed 's/^/    /'
    fi

    build_one empty_static "$cc" empty.c "$static_flags"
    whole_override "empty program, pkg-config kamepoolalloc-static" "$tmp/empty_static"
    if [ -x "$tmp/uses_strdup_static_probe" ]; then
      build_one empty_full_static "$cc" empty.c -static "$full_static_flags"
      whole_override "empty program, -static, pkg-config --static kamepoolalloc" "$tmp/empty_full_static"
    fi
    ;;
  *)
    echo "usage: link_consumers.sh cmake|pkgconfig BUILD_DIR CC CXX" >&2
    exit 2
    ;;
esac

echo "$failed failed"
[ "$failed" -eq 0 ]
