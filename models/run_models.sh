#!/bin/sh
# Checks the Spin models of the pool's lock-free protocols (see README.md).
#
# For every model: an exhaustive safety search of each configuration must
# find no error; every mutation (a bug planted with spin -DBUG_...) must be
# found; every reachability probe must be reached; where a model says so,
# the termination search (no cycle in the state graph) must find none.
#
#   sh models/run_models.sh          the standard checks (about two minutes)
#   sh models/run_models.sh MODEL... only those models (ctest runs each
#                                    model as its own test, spin_MODEL)
#   sh models/run_models.sh --list   the models' names
#   KP_SPIN_DEEP=1 sh ...            also larger configurations (slower)
#   KP_SPIN_KEEP=dir sh ...          keep the work files (pan.out, trails)
#
# Exit status: 0 all passed, 1 a check failed, 2 an unknown model, 77 spin
# or gcc missing.

set -u

all_models="chunk_claim remote_free recycle_l2 heap_slots"
if [ "${1:-}" = --list ]; then
  echo "$all_models"
  exit 0
fi
selected=${*:-$all_models}
for m in $selected; do
  case " $all_models " in
    *" $m "*) ;;
    *) echo "run_models.sh: unknown model '$m' (models: $all_models)" >&2; exit 2 ;;
  esac
done

for tool in spin gcc; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "run_models.sh: '$tool' not found; install it (Debian: apt-get install spin gcc) to check the models" >&2
    exit 77
  fi
done

here=$(cd "$(dirname "$0")" && pwd)

if [ -n "${KP_SPIN_KEEP:-}" ]; then
  work=$KP_SPIN_KEEP
  mkdir -p "$work" || exit 1
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/kp-spin.XXXXXX") || exit 1
  trap 'rm -rf "$work"' EXIT
  trap 'exit 130' INT TERM
fi

results=$work/results
: >"$results"
runs=0

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

# build MODEL "FLAGS" OPT: spin -a and gcc in a fresh directory; sets $dir.
# With $mode=np, pan is built for the non-progress cycle search.
mode=
build() {
  runs=$((runs + 1))
  dir=$work/$runs-$1
  mkdir -p "$dir" && cp "$here/$1.pml" "$dir/" || return 1
  # shellcheck disable=SC2086 # FLAGS is a list of -D options
  (cd "$dir" && spin $2 -a "$1.pml" >spin.log 2>&1) || { cat "$dir/spin.log"; return 1; }
  if [ "$mode" = np ]; then set -- "$1" "$2" "$3" -DNP; else set -- "$1" "$2" "$3" -DSAFETY; fi
  (cd "$dir" && gcc "$3" -w "$4" -DCOLLAPSE -o pan pan.c >gcc.log 2>&1) || { cat "$dir/gcc.log"; return 1; }
}

# search: runs pan in $dir, with probe $cover armed if set; sets $states
# and $errors.
cover=
search() {
  if [ "$mode" = np ]; then set -- -l; else set --; fi
  (cd "$dir" && env ${cover:+KP_COVER=$cover} ./pan "$@" -m100000 >pan.out 2>&1)
  states=$(awk '/states, stored/ { print $1; exit }' "$dir/pan.out")
  errors=$(sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' "$dir/pan.out" | head -n 1)
  : "${states:=?}" "${errors:=?}"
}

incomplete() { grep -q -e 'max search depth too small' -e 'Search not completed' -e 'out of memory' "$dir/pan.out"; }

# The first error pan reported, for the log.
first_error() {
  grep -m 1 -e 'assertion violated' -e 'invalid end state' -e 'non-progress cycle' "$dir/pan.out" |
    sed 's/^pan:[0-9]*: *//; s/ (at depth [0-9]*)//' | cut -c 1-100
}

record() { # MODEL KIND ok|FAIL LINE
  echo "$1 $2 $3" >>"$results"
  printf '%-4s %-12s %s\n' "$3" "$1" "$4"
}

show_failure() {
  if [ "$mode" = np ]; then
    echo "     reproduce: cd $here && spin ${2:+$2 }-a $1.pml && gcc -O2 -DNP -DCOLLAPSE -o pan pan.c && ./pan -l -m100000"
  else
    echo "     reproduce: cd $here && spin ${2:+$2 }-a $1.pml && gcc -O2 -DSAFETY -DCOLLAPSE -o pan pan.c && ./pan -m100000"
  fi
  [ -f "$dir/pan.out" ] && sed 's/^/     | /' "$dir/pan.out" | head -n 25
}

# verify MODEL "FLAGS" [PROBES]: the search must find no error; then each
# probe of PROBES (a list of numbers) must be reached with the same binary.
verify() {
  t0=$(now)
  if ! build "$1" "$2" -O2; then
    record "$1" verify FAIL "verify ${2:-(default)}: does not build"
    return
  fi
  search
  if [ "$errors" = 0 ] && ! incomplete; then
    record "$1" verify ok "verify ${2:-(default)}: no error in $states states ($(since "$t0"))"
  else
    record "$1" verify FAIL "verify ${2:-(default)}: $errors error(s): $(first_error)"
    show_failure "$1" "$2"
    return
  fi
  [ $# -ge 3 ] || return
  t0=$(now)
  missed=
  n=0
  for k in $3; do
    cover=$k
    search
    cover=
    grep -q "kp_cover_k != $k )" "$dir/pan.out" || missed="$missed $k"
    n=$((n + 1))
  done
  if [ -z "$missed" ]; then
    record "$1" probes ok "probes ${2:-(default)}: all $n reachable ($(since "$t0"))"
  else
    record "$1" probes FAIL "probes ${2:-(default)}: never reached:$missed"
  fi
}

# terminates MODEL "FLAGS": the non-progress cycle search (no progress
# label anywhere, so any cycle counts) must find none: every run ends.
terminates() {
  t0=$(now)
  mode=np
  if ! build "$1" "$2" -O2; then
    record "$1" termination FAIL "termination ${2:-(default)}: does not build"
    mode=
    return
  fi
  search
  if [ "$errors" = 0 ] && ! incomplete; then
    record "$1" termination ok "termination ${2:-(default)}: no cycle in $states states ($(since "$t0"))"
  else
    record "$1" termination FAIL "termination ${2:-(default)}: $errors error(s): $(first_error)"
    show_failure "$1" "$2"
  fi
  mode=
}

# expect_error MODEL KIND "FLAGS" WHAT [np]: the search (with np: the
# non-progress cycle search) must report an error.
expect_error() {
  t0=$(now)
  mode=${5:-}
  if ! build "$1" "$3" -O0; then
    record "$1" "$2" FAIL "$2 $3: does not build"
    return
  fi
  search
  if [ "$errors" != 0 ] && [ "$errors" != "?" ] && [ -n "$(first_error)" ]; then
    record "$1" "$2" ok "$2 $3: found ($(first_error); $(since "$t0"))"
  else
    record "$1" "$2" FAIL "$2 $3: NOT found in $states states -- $4"
    show_failure "$1" "$3"
  fi
  mode=
}

echo "Spin models of the lock-free protocols ($(spin -V | head -n 1))"

# The reachability probes a model declares: 1 .. COVER_POINTS.
cover_points() { seq 1 "$(sed -n 's/^#define COVER_POINTS \([0-9]*\).*/\1/p' "$here/$1.pml")"; }

# ---- chunk_claim: region.c unit bitmap, cleaner, release.c's two ways to free
check_chunk_claim() {
  m=chunk_claim
  verify $m "" "$(cover_points $m)"
  terminates $m "-DSPURIOUS=0 -DA_ROUNDS=1"
  expect_error $m mutation "-DBUG_RELEASE_ORDER" "release frees the units before marking them dirty"
  expect_error $m mutation "-DBUG_PURGE_NOCLAIM" "purge without claiming the units"
  expect_error $m mutation "-DBUG_CLAIM_PLAIN" "claim by load and store"
  expect_error $m mutation "-DBUG_DIRTY_ANY" "dirty pass blind to the claimed bits"
  expect_error $m mutation "-DBUG_STOP_EARLY" "claim stops without looking at cleaning"
  expect_error $m mutation "-DBUG_STOP_LOADS" "stop test reads cleaned before cleaning"
  expect_error $m mutation "-DBUG_CLEANING_LATE" "cleaner counts itself after its claim"
  expect_error $m mutation "-DBUG_COUNT_ORDER" "cleaner leaves cleaning before counting cleaned"
  expect_error $m mutation "-DBUG_KEPT_LATE" "cleaner frees refused units before marking them dirty"
  expect_error $m mutation "-DSPURIOUS=0 -DA_ROUNDS=1 -DBUG_WAIT_CLEANER" "claim waits for the cleaner without a bound" np
  if [ -n "${KP_SPIN_DEEP:-}" ]; then
    terminates $m "-DSPURIOUS=0"
    verify $m "-DB_ROUNDS=2"
    verify $m "-DCLEANERS=2 -DA_ROUNDS=1"
  fi
}

# ---- remote_free: remote.c batches, detach, adoption; alloc.c, heap.c -----
check_remote_free() {
  m=remote_free
  verify $m "-DN=3 -DALLOCS=4" "$(seq 1 18) 21"
  verify $m "-DN=2 -DALLOCS=4 -DTRIM" "19 20"
  verify $m "-DN=4 -DALLOCS=4"
  for bug in DU_UNCHECKED PUSH_OLD_COUNT DETACH_EARLY ADOPT_STORE RELEASE_BLIND RELEASE_WEAK ROOM_LATE DETACH_NOCHECK COLLECT_LOAD; do
    expect_error $m mutation "-DN=3 -DALLOCS=4 -DBUG_$bug" "see remote_free.pml"
  done
  if [ -n "${KP_SPIN_DEEP:-}" ]; then
    verify $m "-DN=3 -DALLOCS=5"
    verify $m "-DN=3 -DALLOCS=4 -DTRIM"
    verify $m "-DN=3 -DALLOCS=4 -DAMALLOCS=2"
    verify $m "-DN=3 -DALLOCS=5 -DBMAX=3"
  fi
}

# ---- recycle_l2: recycle.c global L2 -----------------------------------------
check_recycle_l2() {
  m=recycle_l2
  verify $m "" "$(cover_points $m)"
  terminates $m ""
  expect_error $m mutation "-DBUG_SIZE_EARLY" "size read before owning the block"
  expect_error $m mutation "-DBUG_SIZE_EARLY -DNO_READ_CHECK" "stale size used after an ABA"
  expect_error $m mutation "-DBUG_PUSH_BLIND" "push by load and store"
  expect_error $m mutation "-DBUG_TAKE_PLAIN" "take by load and store"
  expect_error $m mutation "-DBUG_RETRY" "push retried until it succeeds" np
  expect_error $m mutation "-DBUG_COUNT_LATE" "push counts its bytes after the CAS"
}

# ---- heap_slots: heap.c heap slot bitmap and slab list --------------------
check_heap_slots() {
  m=heap_slots
  verify $m "" "$(cover_points $m)"
  expect_error $m mutation "-DBUG_SLOT_PLAIN" "claim by load and store"
  expect_error $m mutation "-DBUG_RELEASE_STORE" "release by load and store"
  expect_error $m mutation "-DBUG_PUSH_PLAIN" "slab pushed by a plain store"
}

for m in $selected; do
  "check_$m"
done

# ---- summary --------------------------------------------------------------
echo
awk -v models="$all_models" '
  { model[$1] = 1; n[$1 " " $2]++; if ($3 == "ok") good[$1 " " $2]++; else bad[$1]++ }
  END {
    n_order = split(models, order, " ")
    for (i = 1; i <= n_order; i++) {
      m = order[i]
      if (!(m in model)) continue
      line = sprintf("%-12s %s:", m, bad[m] ? "FAILED" : "ok")
      split("verify probes termination mutation", kinds, " ")
      for (j = 1; j <= 4; j++) {
        k = m " " kinds[j]
        if (n[k]) line = line sprintf(" %s %d/%d", kinds[j], good[k] + 0, n[k])
      }
      print line
    }
  }' "$results"
passed=$(awk '$3 == "ok"' "$results" | wc -l)
failed=$(awk '$3 != "ok"' "$results" | wc -l)
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
