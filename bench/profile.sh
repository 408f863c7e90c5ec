#!/bin/sh
# Where a program's CPU time goes, by module and by function, from the
# samples of bench/sampler.c.  Usage:
#   profile.sh SAMPLER_SO LIB|system PROGRAM [ARGS...]
# LIB is preloaded beside the sampler ("system": the C library's
# allocator).  Functions are named with addr2line, which reads the symbol
# table, so hidden functions of the pool are named too.  TOP (default 15)
# functions are listed.
set -eu
[ $# -ge 3 ] || { echo "usage: profile.sh SAMPLER_SO LIB|system PROGRAM [ARGS...]" >&2; exit 2; }
sampler=$1 lib=$2; shift 2
command -v addr2line >/dev/null || { echo "profile.sh: addr2line (binutils) is needed" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
if [ "$lib" = system ]; then preload=$sampler; else preload="$lib $sampler"; fi
SAMPLER_OUT="$work/samples" LD_PRELOAD="$preload" "$@"
total=$(wc -l < "$work/samples")
echo "samples: $total"
echo "by module:"
awk '{ print $1 }' "$work/samples" | sort | uniq -c | sort -rn | head -8
echo "by function:"
awk '$1 != "?" { print $1 }' "$work/samples" | sort -u | while read -r module; do
  awk -v m="$module" '$1 == m { print $2 }' "$work/samples" |
    addr2line -f -e "$module" 2>/dev/null | awk 'NR % 2 == 1' |
    sed "s|^|$(basename "$module") |"
done | sort | uniq -c | sort -rn | head -"${TOP:-15}"
