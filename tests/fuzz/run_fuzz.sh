#!/bin/sh
# Runs the libFuzzer target for a bounded time, starting from a copy of the
# committed corpus and regressions (the fuzzer writes new inputs into the
# copy, never into tests/fuzz).  Fails on any crash, leak, timeout or
# out-of-memory report.
#
# Usage: run_fuzz.sh FUZZER WORKDIR SECONDS [libFuzzer options...]
set -eu

if [ $# -lt 3 ]; then
  echo "usage: $0 FUZZER WORKDIR SECONDS [libFuzzer options...]" >&2
  exit 2
fi
fuzzer=$1 work=$2 seconds=$3
shift 3
src=$(cd "$(dirname "$0")" && pwd)

mkdir -p "$work/corpus" "$work/artifacts"
for f in "$src"/corpus/* "$src"/regressions/*; do
  case $f in *.md) continue ;; esac
  [ -f "$f" ] && cp "$f" "$work/corpus/"
done

echo "run_fuzz: $fuzzer for $seconds s from $work/corpus ($(ls "$work/corpus" | wc -l) inputs)"
# allocator_may_return_null: the pool passes some impossible requests on to
# the system allocator (the sanitizer's here), which must answer NULL; the
# sanitizer warns of each, and the warnings for malloc(PTRDIFF_MAX), which
# the target makes on purpose, are filtered out of the log.  No quarantine:
# the system allocator serves aligned requests past the byte ceiling, and
# ASan poisons the shadow of their whole alignment padding while counting
# only the requested bytes against its quarantine, so freed 64 MiB-aligned
# blocks of a few bytes would pile up in RSS by the thousand.  The pool
# never touches a block of the system allocator after freeing it.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=1:quarantine_size_mb=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
rm -f "$work/status"
touch "$work/started"
{
  rc=0
  "$fuzzer" -max_total_time="$seconds" -max_len=2048 -timeout=60 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$@" "$work/corpus" 2>&1 || rc=$?
  echo "$rc" >"$work/status"
} | { grep -v 'AddressSanitizer failed to allocate 0x7fffffffffffffff bytes' || true; }
rc=$(cat "$work/status" 2>/dev/null || echo 1)

if [ "$rc" -ne 0 ]; then
  echo "run_fuzz: the fuzzer failed (exit $rc); its input:" >&2
  find "$work/artifacts" -type f -newer "$work/started" >&2
  echo "run_fuzz: replay it with FUZZ_API_TRACE=1 $fuzzer FILE, minimise it with" >&2
  echo "  $fuzzer -minimize_crash=1 -runs=20000 -exact_artifact_path=MIN FILE" >&2
  echo "and commit MIN under tests/fuzz/regressions/ (docs/fuzzing.md)." >&2
  exit "$rc"
fi
echo "run_fuzz: no failure in $seconds s"
