#!/bin/sh
# Real programs under the pool: each is run once on the C library's malloc
# and once with LD_PRELOAD=libkamepoolalloc.so, and their outputs must be
# identical.  A case fails on a nonzero exit, a crash, a timeout or a
# difference in output.
#
#   sh tests/real_programs.sh build/libkamepoolalloc.so
#
# Cases: python3 (an allocation-heavy script, with pymalloc and with
# PYTHONMALLOC=malloc), gcc and g++ compiling generated sources, git
# (commits, merges, gc, fsck), sqlite3 (200k rows, indexes, aggregates),
# and C++ programs on the library's operator new: g++ and clang++
# compiling a template-heavy translation unit.
# Exit status: 0 all passed, 1 something failed, 77 nothing failed but a
# program was missing (ctest reports that as skipped).
#
# KP_REAL_TIMEOUT (seconds, default 120) bounds every single command;
# KP_REAL_KEEP=1 keeps the work files (outputs of both runs) for a look.
set -u
export LC_ALL=C

lib=${1:-}
if [ -z "$lib" ] || [ ! -f "$lib" ]; then
  echo "usage: real_programs.sh path/to/libkamepoolalloc.so (got '${lib}')" >&2
  exit 2
fi
lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
here=$(cd "$(dirname "$0")" && pwd)
limit=${KP_REAL_TIMEOUT:-120}
# gen_c, gen_cxx, gen_sql: the inputs, shared with the benchmark runner.
. "$here/real_inputs.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kp-real.XXXXXX")
if [ -n "${KP_REAL_KEEP:-}" ]; then
  echo "keeping the work files in $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
trap 'exit 130' INT TERM
mkdir -p "$tmp/home"

passed=0
failed=0
skipped=0
mode=base       # base: no preload; pre: LD_PRELOAD=$lib

pass() { passed=$((passed + 1)); echo "PASS $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }
skip() { skipped=$((skipped + 1)); echo "SKIP $1"; }

# Runs a command in a clean, fixed environment (so the two runs differ
# only in LD_PRELOAD), bounded by $limit.  Extra NAME=VALUE words before
# the command are added to the environment.
x() {
  if [ "$mode" = pre ]; then
    timeout -k 5 "$limit" env -i PATH=/usr/bin:/bin HOME="$tmp/home" LC_ALL=C TZ=UTC \
      LD_PRELOAD="$lib" "$@"
  else
    timeout -k 5 "$limit" env -i PATH=/usr/bin:/bin HOME="$tmp/home" LC_ALL=C TZ=UTC "$@"
  fi
}

# Describes an exit status: "exit N", "crashed (SIGSEGV)" or "timed out".
why() {
  if [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; then
    echo "timed out after ${limit}s"
  elif [ "$1" -gt 128 ]; then
    echo "crashed (SIG$(kill -l $(($1 - 128)) 2>/dev/null || echo $(($1 - 128))))"
  else
    echo "exit status $1"
  fi
}

# step LABEL CMD...: runs CMD via x with stdout to $out (appended) and
# stderr to $err; on failure records the reason in $tmp/reason.
step() {
  label=$1
  shift
  x "$@" >>"$out" 2>>"$err"
  st=$?
  if [ $st -ne 0 ]; then
    echo "$label: $(why $st)" >"$tmp/reason"
    return 1
  fi
  return 0
}

# compare NAME BASEFILE PREFILE
compare() {
  if cmp -s "$2" "$3"; then
    pass "$1"
  else
    fail "$1: output differs between the C library's malloc and the pool"
    diff -u "$2" "$3" | head -40 | sed 's/^/    /'
  fi
}

# run_case NAME FUNC: runs FUNC in both modes, each with its own $out,
# $err and $work, then compares the outputs.
run_case() {
  name=$1
  func=$2
  for mode in base pre; do
    work=$tmp/$name.$mode
    out=$tmp/$name.$mode.out
    err=$tmp/$name.$mode.err
    rm -rf "$work"
    mkdir -p "$work"
    : >"$out"
    : >"$err"
    rm -f "$tmp/reason"
    start=$(date +%s)
    if ! $func; then
      where="on the C library's malloc"
      [ $mode = pre ] && where="under LD_PRELOAD"
      fail "$name: $(cat "$tmp/reason" 2>/dev/null || echo failed) $where"
      tail -n 20 "$err" | sed 's/^/    /'
      mode=base
      return
    fi
    echo "  $name ($mode): $(($(date +%s) - start)) s"
  done
  mode=base
  compare "$name" "$tmp/$name.base.out" "$tmp/$name.pre.out"
}

have() { command -v "$1" >/dev/null 2>&1; }

# ---- the preload takes effect --------------------------------------------

if [ -x /usr/bin/python3 ]; then
  py=/usr/bin/python3
elif have python3; then
  py=$(command -v python3)
else
  py=
fi

check_active() {
  mode=pre
  out=$tmp/active.out
  err=$tmp/active.err
  : >"$out"
  : >"$err"
  # In the preloaded process: the library is mapped, its API is visible,
  # and malloc(4096) has the pool's shape (page-aligned, usable 4096).
  if step "python3 -c" "$py" -S -c '
import ctypes
maps = open("/proc/self/maps").read()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.malloc_usable_size.restype = ctypes.c_size_t
libc.malloc_usable_size.argtypes = [ctypes.c_void_p]
libc.free.argtypes = [ctypes.c_void_p]
p = libc.malloc(4096)
print("mapped", "libkamepoolalloc" in maps)
print("api", hasattr(libc, "kame_pool_malloc_usable_size"))
print("aligned", p % 4096 == 0, "usable", libc.malloc_usable_size(p))
libc.free(p)
'; then
    if grep -qx "mapped True" "$out" && grep -qx "api True" "$out" &&
      grep -qx "aligned True usable 4096" "$out"; then
      pass "preload active (library mapped, malloc served by the pool)"
    else
      fail "preload active: the pool does not serve malloc in a preloaded python3:"
      sed 's/^/    /' "$out"
    fi
  else
    fail "preload active: $(cat "$tmp/reason")"
    tail -n 20 "$err" | sed 's/^/    /'
  fi
  mode=base
}

# ---- python3 ------------------------------------------------------------

case_python_malloc() {
  step "python3 alloc_heavy.py" PYTHONHASHSEED=0 PYTHONMALLOC=malloc \
    "$py" -S "$here/alloc_heavy.py"
}
case_python_pymalloc() {
  step "python3 alloc_heavy.py" PYTHONHASHSEED=0 "$py" -S "$here/alloc_heavy.py"
}

# ---- gcc / g++ ---------------------------------------------------------

case_gcc() {
  gen_c "$work/gen.c" || { echo "generating gen.c failed" >"$tmp/reason"; return 1; }
  step "gcc -O2 -c gen.c" gcc -O2 -frandom-seed=kp -c "$work/gen.c" -o "$work/gen.o" || return 1
  step "gcc gen.o -o gen" gcc "$work/gen.o" -o "$work/gen" || return 1
  # The object file itself must be byte-identical to the other run's.
  cksum <"$work/gen.o" | sed 's/^/gen.o /' >>"$out"
  step "./gen" "$work/gen" || return 1
  if have g++; then
    gen_cxx "$work/gen.cc"
    step "g++ -O2 gen.cc" g++ -O2 -frandom-seed=kp "$work/gen.cc" -o "$work/genxx" || return 1
    step "./genxx" "$work/genxx" || return 1
  fi
  # Proof that the compiler proper ran with the pool: ld.so's own log of
  # the cc1 process shows the library's initialiser being called.
  if [ "$mode" = pre ]; then
    step "gcc (LD_DEBUG)" LD_DEBUG=files LD_DEBUG_OUTPUT="$work/lddebug" \
      gcc -O2 -c "$work/gen.c" -o "$work/gen2.o" || return 1
    ok=no
    for f in "$work"/lddebug.*; do
      [ -f "$f" ] || continue
      if grep -q 'initialize program: .*/cc1$' "$f" && grep -q "calling init: .*libkamepoolalloc" "$f"; then
        ok=yes
      fi
    done
    if [ "$ok" != yes ]; then
      echo "cc1 did not run with libkamepoolalloc preloaded (see ld.so's log)" >"$tmp/reason"
      return 1
    fi
    echo "  cc1 ran with the pool preloaded"
  fi
}

# ---- C++: g++ and clang++ on a template-heavy translation unit -------------
#
# cc1plus carries its own copy of the C++ library, so its operator new is
# its own (and reaches the pool through malloc); clang++ is built on the
# shared libLLVM and libclang-cpp, whose operator new and delete calls the
# preloaded library serves itself, aligned forms included.  ld.so's log of
# symbol bindings proves that.

cxx_templates() {
  compiler=$1
  gen_cxx_templates "$work/tmpl.cc"
  step "$compiler -O1 tmpl.cc" "$compiler" -std=c++17 -O1 -frandom-seed=kp -c "$work/tmpl.cc" -o "$work/tmpl.o" || return 1
  cksum <"$work/tmpl.o" | sed 's/^/tmpl.o /' >>"$out"
  step "$compiler tmpl.o" "$compiler" "$work/tmpl.o" -o "$work/tmpl" || return 1
  step "./tmpl" "$work/tmpl" || return 1
}

case_gxx_templates() { cxx_templates g++; }

case_clangxx_templates() {
  cxx_templates clang++ || return 1
  if [ "$mode" = pre ]; then
    step "clang++ (LD_DEBUG)" LD_DEBUG=bindings LD_DEBUG_OUTPUT="$work/bindings" \
      clang++ -std=c++17 -O1 -fsyntax-only "$work/tmpl.cc" || return 1
    if ! cat "$work"/bindings.* 2>/dev/null | grep "to $lib" | grep -q "symbol \`_Znwm'"; then
      echo "clang++ did not bind operator new to libkamepoolalloc (see ld.so's log)" >"$tmp/reason"
      return 1
    fi
    echo "  clang++ bound operator new to the pool: $(cat "$work"/bindings.* | grep "to $lib" |
      grep -cE "symbol \`_Z(nw|na|dl|da)") operator bindings"
  fi
}

# ---- git ------------------------------------------------------------------

# Every git command runs with a fixed identity and clock so both runs
# produce the same object hashes.
g() {
  step "git $1" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null \
    GIT_AUTHOR_NAME=Kame GIT_AUTHOR_EMAIL=kame@example.invalid \
    GIT_COMMITTER_NAME=Kame GIT_COMMITTER_EMAIL=kame@example.invalid \
    GIT_AUTHOR_DATE="@$((1700000000 + gitclock * 60)) +0000" \
    GIT_COMMITTER_DATE="@$((1700000000 + gitclock * 60)) +0000" \
    git -C "$work/repo" -c pack.threads=2 -c gc.auto=0 "$@"
}

# Writes the files of commit $1 (in the work tree, outside the pool's
# reach: this is input, not the program under test).
git_files() {
  awk -v c="$1" -v dir="$work/repo" 'BEGIN {
    for (j = 0; j < 6; j++) {
      f = sprintf("%s/d%d/f%03d_%d.txt", dir, c % 5, c, j)
      for (l = 0; l < 20 + (c * 7 + j) % 200; l++)
        printf "commit %d file %d line %d %s\n", c, j, l, substr("abcdefghijklmnopqrstuvwxyz", 1 + (l % 26)) > f
      close(f)
    }
    f = dir "/shared.txt"
    for (l = 0; l < 300; l++)
      printf "%d %s\n", l, (l % 17 == c % 17) ? "changed in " c : "same" > f
    close(f)
  }'
}

case_git() {
  gitclock=0
  mkdir -p "$work/repo/d0" "$work/repo/d1" "$work/repo/d2" "$work/repo/d3" "$work/repo/d4"
  g init -q -b main || return 1
  c=1
  while [ "$c" -le 60 ]; do
    gitclock=$c
    if [ $((c % 15)) -eq 0 ]; then
      # A side branch with its own commit, merged back.
      g checkout -q -b "side$c" || return 1
      git_files "$((c + 1000))"
      g add -A || return 1
      g commit -q -m "side $c" || return 1
      g checkout -q main || return 1
      git_files "$c"
      g add -A || return 1
      g commit -q -m "commit $c" || return 1
      g merge -q --no-ff -X theirs -m "merge side$c" "side$c" || return 1
    else
      git_files "$c"
      g add -A || return 1
      g commit -q -m "commit $c" || return 1
    fi
    c=$((c + 1))
  done
  g log --stat --format='%H %an %ad %s' || return 1
  g rev-list --all --objects || return 1
  g gc -q || return 1
  g repack -a -d -f -q --window=50 --depth=20 || return 1
  g fsck --full --strict --no-progress || return 1
  g cat-file --batch-all-objects --batch-check || return 1
  g log -p --format='%H %s' -- shared.txt d3 || return 1
  g blame -s shared.txt || return 1
  g diff --stat HEAD~30 HEAD || return 1
  g grep -c 'line 1[0-9]' HEAD -- d1 || return 1
  # git archive's tar output is deterministic: hash it.
  x git -C "$work/repo" archive --format=tar HEAD >"$work/archive.tar" 2>>"$err" ||
    { echo "git archive: $(why $?)" >"$tmp/reason"; return 1; }
  cksum <"$work/archive.tar" | sed 's/^/archive /' >>"$out"
}

# ---- sqlite3 ------------------------------------------------------------

case_sqlite() {
  gen_sql "$work/q.sql"
  step "sqlite3" sqlite3 -batch -bail "$work/db.sqlite" ".read $work/q.sql"
}

# ---- run --------------------------------------------------------------------

echo "real programs with LD_PRELOAD=$lib"
t0=$(date +%s)

if [ -n "$py" ]; then
  check_active
  run_case python3-malloc case_python_malloc
  run_case python3-pymalloc case_python_pymalloc
else
  skip "python3: not installed (apt-get install python3)"
fi

if have gcc; then
  run_case gcc case_gcc
else
  skip "gcc: not installed (apt-get install gcc g++)"
fi

if have g++; then
  run_case g++-templates case_gxx_templates
else
  skip "g++: not installed (apt-get install g++)"
fi

if have clang++; then
  run_case clang++-templates case_clangxx_templates
else
  skip "clang++: not installed (apt-get install clang)"
fi

if have git; then
  run_case git case_git
else
  skip "git: not installed (apt-get install git)"
fi

if have sqlite3; then
  run_case sqlite3 case_sqlite
else
  skip "sqlite3: not installed (apt-get install sqlite3)"
fi

echo "real programs: $(($(date +%s) - t0)) s"
echo "$passed passed, $failed failed, $skipped skipped"
if [ $failed -ne 0 ]; then
  exit 1
fi
if [ $skipped -ne 0 ]; then
  exit 77
fi
exit 0
