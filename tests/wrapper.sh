#!/bin/sh
# The kamepool wrapper end to end: from the build tree (it preloads the
# build's library) and installed into a scratch prefix (it preloads the
# installed one), with the manual pages installed beside it.
#
#   sh tests/wrapper.sh BUILD_DIR WORK_DIR
set -u
build=${1:?usage: wrapper.sh BUILD_DIR WORK_DIR}
work=${2:?usage: wrapper.sh BUILD_DIR WORK_DIR}
unset LD_PRELOAD KAMEPOOL_LIBRARY
for v in $(env | sed -n 's/^\(KAME_POOL_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
build=$(cd "$build" && pwd)
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
failed=0
fail() { echo "FAIL $1"; failed=$((failed + 1)); }
pass() { echo "PASS $1"; }
# expect NAME STATUS COMMAND...: runs COMMAND, output in $work/out
expect() {
  name=$1 want=$2
  shift 2
  "$@" >"$work/out" 2>&1
  got=$?
  if [ "$got" = "$want" ]; then pass "$name"; else fail "$name: exit $got, wanted $want"; cat "$work/out"; fi
}
has() { # NAME TEXT: $work/out contains TEXT
  if grep -qF -- "$2" "$work/out"; then pass "$1"; else fail "$1: no '$2' in:"; cat "$work/out"; fi
}

run_all() { # WRAPPER LIBDIR: the checks for one wrapper
  k=$1 libdir=$2
  expect "$k --version" 0 "$k" --version
  has "version line" "kamepool (kamepoolalloc) "
  expect "the command runs with the library preloaded" 0 "$k" -- sh -c 'cat /proc/$$/maps; echo "LD_PRELOAD=$LD_PRELOAD"'
  has "its maps name the library of $libdir" "$libdir/libkamepoolalloc.so"
  has "LD_PRELOAD names it" "LD_PRELOAD=$libdir/libkamepoolalloc.so"
  expect "--stats prints the statistics at exit" 0 "$k" --stats -- /usr/bin/python3 -c 'x = [bytes(100) for _ in range(10000)]'
  has "statistics table" "kamepoolalloc statistics (version "
  has "threads line" "  threads_seen "
  expect "--stats-json" 0 "$k" --stats-json -- /usr/bin/python3 -c 'pass'
  has "JSON object" '{"version": '
  expect "flags set options" 0 "$k" --verbose --max-bytes 2G --check 2 --cache-cap 64M --cache-top=16M \
    --drain-ms 5 --exit-reclaim off --set stats_json=0 -- true
  has "MAX_BYTES" "KAME_POOL_MAX_BYTES=2147483648"
  has "CHECK" "KAME_POOL_CHECK=full"
  has "LARGE_CACHE_CAP" "KAME_POOL_LARGE_CACHE_CAP=67108864"
  has "LARGE_CACHE_TOP" "KAME_POOL_LARGE_CACHE_TOP=16777216"
  has "LAZY_DRAIN_MS" "KAME_POOL_LAZY_DRAIN_MS=5"
  has "THREAD_EXIT_RECLAIM" "KAME_POOL_THREAD_EXIT_RECLAIM=0"
  expect "a malformed value is the library's to report" 0 "$k" --max-bytes 2x -- true
  has "reported" "kamepoolalloc: ignoring KAME_POOL_MAX_BYTES=2x: not a valid value"
  expect "the command's exit status" 7 "$k" -- sh -c 'exit 7'
  expect "the first non-option starts the command" 0 "$k" --stats true --not-an-option-of-ours
  expect "an existing LD_PRELOAD is kept after the pool" 0 env LD_PRELOAD=/nonexistent.so "$k" -- sh -c 'echo "LD_PRELOAD=$LD_PRELOAD"'
  has "kept" ":/nonexistent.so"
  expect "no command" 2 "$k"
  expect "unknown flag" 2 "$k" --frobnicate -- true
  expect "missing value" 2 "$k" --max-bytes
  expect "--set without =" 2 "$k" --set CHECK -- true
  expect "a library that is not there" 127 "$k" --library /nonexistent/lib.so -- true
  expect "--tune-report --quick" 0 "$k" --tune-report --quick
  has "tune: advice" "(advice only: nothing is applied)"
  has "tune: mmap" "  mmap 32 MiB (not touched)"
  has "tune: page fault" "  page fault, per page (first touch)"
  has "tune: madvise" "  madvise(DONTNEED) of a 256 KiB unit, touched"
  has "tune: shootdown" "(TLB shootdown)"
  has "tune: drain" "  KAME_POOL_LAZY_DRAIN_MS="
  has "tune: top" "  KAME_POOL_LARGE_CACHE_TOP="
  has "tune: reclaim" "  KAME_POOL_THREAD_EXIT_RECLAIM="
  # Every figure is a positive number.
  if awk '/ us$/ { if ($(NF-1) + 0 <= 0) bad = 1; n++ } END { exit !(n >= 7 && !bad) }' "$work/out"; then
    pass "tune: figures positive"
  else
    fail "tune: figures"; cat "$work/out"
  fi
  # Its suggestions are values the library accepts.
  sed -n 's/^  KAME_POOL_\([A-Z_]*=[^ ]*\)$/--set \1/p' "$work/out" | tr '\n' ' ' >"$work/sets"
  # shellcheck disable=SC2046
  expect "tune: suggestions accepted" 0 "$k" $(cat "$work/sets") -- true
  if grep -q "ignoring" "$work/out"; then fail "tune: a suggestion was refused"; cat "$work/out"; else pass "tune: no suggestion refused"; fi
}

run_all "$build/kamepool" "$build"

prefix=$work/prefix
if ! cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1; then
  fail "cmake --install"
  cat "$work/install.log"
  exit 1
fi
[ -x "$prefix/bin/kamepool" ] || fail "bin/kamepool not installed"
lib=$(find "$prefix" -name 'libkamepoolalloc.so.0' | head -n 1)
run_all "$prefix/bin/kamepool" "$(dirname "$lib")"
for page in man1/kamepool.1 man3/kamepoolalloc.3; do
  f=$(find "$prefix" -path "*/man/$page" | head -n 1)
  if [ -z "$f" ]; then
    fail "$page not installed"
  elif grep -q '@VERSION@' "$f" || ! grep -q '^\.TH ' "$f"; then
    fail "$page: not a configured manual page"
  else
    pass "$page installed"
  fi
done
# The installed wrapper, moved with its tree, still finds its own library.
mv "$prefix" "$work/moved"
expect "a moved install finds its library" 0 "$work/moved/bin/kamepool" -- sh -c 'cat /proc/$$/maps'
has "the moved library" "$work/moved/"

echo "$failed failed"
[ "$failed" = 0 ]
