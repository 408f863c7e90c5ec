#!/bin/sh
# What one cross-thread free costs, by allocator: bench_mixed at two
# threads with its share of frees sent to the other thread (-r PERCENT)
# and with none (-r 0), the allocators and both settings interleaved, REPS
# times; the difference of the median CPU seconds, divided by the number
# of frees that crossed, is the CPU time a remote free adds (the free
# itself, and whatever the block's lines cost when they come back).
# Usage: remote_free_cost.sh BENCH_MIXED LIB|system...
# Environment: REPS (default 5), OPS per thread (default 2M), PERCENT
# (default 10).  Give it a quiet machine: the figure is a difference.
set -eu
[ $# -ge 2 ] || { echo "usage: remote_free_cost.sh BENCH_MIXED LIB|system..." >&2; exit 2; }
bin=$1; shift
reps=${REPS:-5} ops=${OPS:-2M} percent=${PERCENT:-10}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
results() { # LIB: the prefix of the files holding its runs (one per PERCENT)
  echo "$work/$(echo "$1" | tr '/' '_')"
}
field() { # KEY LINE: the value of KEY= in a RESULT line
  printf '%s\n' "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"
}
run() { # LIB PERCENT: appends "cpu_seconds remote_frees" to the lib's file
  if [ "$1" = system ]; then pre=; else pre=$1; fi
  line=$(LD_PRELOAD=$pre "$bin" -t 2 -n "$ops" -r "$2" | grep '^RESULT') ||
    { echo "remote_free_cost.sh: $bin failed under $1" >&2; exit 1; }
  echo "$(field cpu_seconds "$line") $(field remote_frees "$line")" >> "$(results "$1").$2"
}
i=0
while [ $i -lt "$reps" ]; do
  for lib in "$@"; do run "$lib" 0; run "$lib" "$percent"; done
  i=$((i + 1))
done
median() { sort -n | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '%-60s %10s %10s %12s %14s\n' allocator "cpu_s r0" "cpu_s r$percent" remote_frees "ns/remote free"
for lib in "$@"; do
  f=$(results "$lib")
  c0=$(awk '{ print $1 }' "$f.0" | median)
  c1=$(awk '{ print $1 }' "$f.$percent" | median)
  n=$(awk '{ print $2 }' "$f.$percent" | median)
  awk -v l="$lib" -v a="$c0" -v b="$c1" -v n="$n" \
    'BEGIN { printf "%-60s %10.3f %10.3f %12d %14.0f\n", l, a, b, n, (n > 0 ? (b - a) / n * 1e9 : 0) }'
done
