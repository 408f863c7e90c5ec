#!/bin/sh
# The benchmark suite checks itself: every workload runs (briefly) on the
# C library's malloc and under the pool and must pass its own self-check;
# the runner, given deliberately broken allocators, must report each
# failure as such; the runner's own commands for the newer workloads must
# give figures; a small A/B run must write its report, CSV files and (with
# gnuplot) its charts, and tell its progress; and every column runs.csv
# can have must be documented in docs/benchmarks.md.
#
#   sh tests/bench_runner.sh BENCH_DIR LIBKAMEPOOLALLOC BROKEN_DIR
#
# BROKEN_DIR holds broken_overlap.so, broken_crash.so, broken_hang.so and
# broken_null.so (tests/broken_alloc.c).
set -u
export LC_ALL=C

bench=${1:?bench dir}
lib=${2:?library}
broken=${3:?broken allocator dir}
here=$(cd "$(dirname "$0")" && pwd)
runner="$here/../bench/run_bench.py"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kp-bench-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failed=0

pass() { echo "PASS $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1"; }

# 1. Every workload, small, with and without the pool.
for w in "loop 64 2 -n 200000" "loop 1M 2 -n 2000" "handoff -t 2 -s 64 -n 100K" \
  "handoff -t 8 -s 1K -n 20K" "churn -t 8 -n 100K" "mixed -t 8 -n 50K" \
  "migrate -t 8 -n 1M" "frag -n 200K" "false_sharing -t 8 -m passive -n 20K" \
  "false_sharing -t 2 -m active -n 20K" "large_handoff -s 256K -n 2000" \
  "large_handoff -t 2 -s 8M -n 20" "rotate -t 2 -n 40 -w 4 -b 8M" "rotate -t 8 -n 40 -w 4 -b 1M" \
  "server -t 1 -n 20K" "server -t 8 -n 40K -c 4K" "idle_owner -m 16"; do
  set -- $w
  prog=$bench/bench_$1
  shift
  for pre in "" "$lib"; do
    where=${pre:+under the pool}
    where=${where:-on the C library\'s malloc}
    LD_PRELOAD=$pre timeout 120 "$prog" "$@" >"$tmp/out" 2>"$tmp/err"
    st=$?
    if [ $st -eq 0 ] && grep -q '^RESULT ' "$tmp/out"; then
      pass "bench_${w%% *} $* $where"
    else
      fail "bench_${w%% *} $* $where: exit $st"
      tail -n 5 "$tmp/err" | sed 's/^/    /'
    fi
  done
done

# 2. Broken allocators: each failure shows in the table as what it is.
check_broken() { # mode expected-text [runner options]
  out=$tmp/broken-$1
  python3 "$runner" --only kamepoolalloc --lib "$broken/broken_$1.so" --bin-dir "$bench" \
    --workloads churn --reps 1 --timeout 5 --no-charts --out "$out" ${3:-} >"$out.log" 2>&1
  st=$?
  # churn has three cases (1, 2 and 8 threads): each row must show the
  # failure, and none a figure.
  shown=$(grep -c "^| [0-9]* threads* | kamepoolalloc | \*\*$2 (1/1)\*\* | - |" \
    "$out/report.md" 2>/dev/null)
  figures=$(grep -c '^| [0-9]* threads* | kamepoolalloc | [0-9]' "$out/report.md" 2>/dev/null)
  if [ $st -eq 1 ] && [ "$shown" = 3 ] && [ "$figures" = 0 ]; then
    pass "runner reports a $1 allocator as $2"
  else
    fail "runner with a $1 allocator: exit $st, '$2' in $shown of 3 rows, $figures figures"
    grep '^| ' "$out/report.md" 2>/dev/null | head -8 | sed 's/^/    /'
    tail -n 5 "$out.log" | sed 's/^/    /'
  fi
}
check_broken overlap "SELF-CHECK FAILED"
check_broken crash "CRASH SIGSEGV" "--progress bar"
# The bar, redrawn in place: run 2 of 3 and its estimate.
esc=$(printf '\033')
if grep -q "${esc}\\[K\\[#* *\\] 1/3  churn, 2 threads, kamepoolalloc  [0-9:]*, about [0-9:]* left" \
  "$tmp/broken-crash.log"; then
  pass "progress bar"
else
  fail "progress bar missing"
  od -c "$tmp/broken-crash.log" | head -n 8 | sed 's/^/    /'
fi
check_broken hang "TIMEOUT"
check_broken null "MALLOC NULL"

# 3. The workloads of the 32 KiB-64 MiB band and the server, as the runner
# starts them: every case gives its figure.
out=$tmp/band
python3 "$runner" --only system --bin-dir "$bench" --lib "$lib" --no-charts --reps 1 \
  --workloads large_handoff,rotate,server,idle_owner --out "$out" >"$out.log" 2>&1
st=$?
rows=$(grep -cE '^\| [^|]+ \| system \| [0-9]' "$out/report.md" 2>/dev/null)
if [ $st -eq 0 ] && [ "$rows" = 10 ]; then
  pass "runner: large_handoff, rotate, server and idle_owner give a figure in all 10 cases"
else
  fail "runner: band workloads: exit $st, $rows of 10 rows with a figure"
  grep '^| ' "$out/report.md" 2>/dev/null | sed 's/^/    /'
  tail -n 5 "$out.log" | sed 's/^/    /'
fi

# 4. An A/B run of the pool against itself writes everything.
out=$tmp/ab
python3 "$runner" --ab "$lib" "$lib" --bin-dir "$bench" --workloads frag,migrate --reps 1 \
  --out "$out" >"$out.log" 2>&1
st=$?
if [ $st -eq 0 ] && [ -s "$out/report.md" ] && [ -s "$out/summary.csv" ] &&
  [ "$(grep -c '^migrate,' "$out/runs.csv")" -eq 6 ] &&
  grep -q '^| migrate | 8 threads | wall s | [0-9.]*× |' "$out/report.md"; then
  pass "A/B run: report, runs.csv and summary.csv"
else
  fail "A/B run: exit $st"
  tail -n 20 "$out.log" | sed 's/^/    /'
fi
# Off a terminal, progress comes as plain lines: the first run, each
# workload as it starts with the time left, and the total at the end.
if grep -q '^run_bench.py: run 1/8 (repetition 1/1): migrate, 1 thread, A; 0:00 spent, estimating the time left$' "$out.log" &&
  grep -q '^run_bench.py: run 7/8 (repetition 1/1): frag, 1 thread, A; [0-9:]* spent, about [0-9:]* left$' "$out.log" &&
  grep -q '^run_bench.py: 8 runs in [0-9:]*$' "$out.log"; then
  pass "A/B run: progress lines"
else
  fail "A/B run: progress lines missing"
  grep '^run_bench.py' "$out.log" | sed 's/^/    /'
fi
# One column per quantity: no repeats, each run's row as long as the header.
if awk -F, 'NR == 1 { n = NF; for (i = 1; i <= NF; i++) if (seen[$i]++) bad = 1 }
            NR > 1 && NF != n { bad = 1 } END { exit bad }' "$out/runs.csv"; then
  pass "A/B run: runs.csv columns"
else
  fail "A/B run: runs.csv columns repeat or rows differ in length"
  head -n 2 "$out/runs.csv" | sed 's/^/    /'
fi
if command -v gnuplot >/dev/null 2>&1; then
  if [ -s "$out/frag.png" ] && [ -s "$out/migrate.png" ] &&
    head -c 8 "$out/migrate.png" | od -An -c | grep -q 'P   N   G'; then
    pass "A/B run: PNG charts"
  else
    fail "A/B run: charts missing"
    ls -l "$out" | sed 's/^/    /'
  fi
else
  echo "SKIP charts: gnuplot is not installed (apt-get install gnuplot-nox)"
fi

# 4. Every column runs.csv can have, over all workloads, is in the table
# of columns in docs/benchmarks.md.
columns=$(cd "$here/../bench" && python3 -c '
import run_bench as rb
ctx = {"bin_dir": "", "quick": True, "real_dir": ""}
print(" ".join(["workload", "case", "allocator", "run", "status"] + rb.RUN_COLUMNS
               + [m.column for m in rb.csv_metrics(rb.build_workloads(ctx))] + ["detail"]))')
undocumented=
for c in $columns; do
  grep -q "^| \`$c\` |" "$here/../docs/benchmarks.md" || undocumented="$undocumented $c"
done
if [ -n "$columns" ] && [ -z "$undocumented" ]; then
  pass "runs.csv columns documented in docs/benchmarks.md"
else
  fail "runs.csv columns not documented in docs/benchmarks.md:${undocumented:- (none listed)}"
fi

echo "$failed failed"
[ $failed -eq 0 ]
