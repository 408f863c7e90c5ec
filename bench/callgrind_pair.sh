#!/bin/sh
# Instructions per 64 B malloc+free pair (the loop of bench_pair included),
# counted by callgrind as the difference between runs of 2N and N pairs, so
# start-up costs cancel.  Usage: callgrind_pair.sh BENCH_PAIR LIB...
# ("system" for the C library's allocator).  PAIR_SIZE=65536 counts pairs
# of another size with bench_pair (default 64 bytes).
set -eu
bin=$1; shift
n=${PAIR_N:-500000}
size=${PAIR_SIZE:-64}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
count() { # lib pairs
  rm -f "$work"/cg.*
  if [ "$1" = system ]; then
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" "$bin" "$2" "$size" >/dev/null 2>&1
  else
    valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$work/cg.%p" \
      env LD_PRELOAD="$1" "$bin" "$2" "$size" >/dev/null 2>&1
  fi
  callgrind_annotate "$(ls -S "$work"/cg.* | head -1)" | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'
}
for lib in "$@"; do
  a=$(count "$lib" $n); b=$(count "$lib" $((2 * n)))
  echo "$lib $(( (b - a) / n ))" | awk '{ printf "%-60s %s instructions per pair\n", $1, $2 }'
done
