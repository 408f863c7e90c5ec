#!/bin/sh
# The pool's blocks under valgrind memcheck, with a library built to
# announce them (KAME_POOL_VALGRIND): a leaked block is reported as
# definitely lost where it was allocated, a read of a freed block as an
# invalid read in a freed block, and a program that does nothing wrong
# gets no report at all.  memcheck is told not to put its own allocator
# in place of the program's (--soname-synonyms=somalloc=nouserintercepts),
# else the pool would not be used at all.
#
# With PLAIN, a build that does not announce them, the leak goes unseen:
# the reports above are the announcements' doing.
#
#   sh tests/valgrind.sh LIBRARY PROGRAMS [PLAIN]
set -u
lib=${1:?usage: valgrind.sh LIBRARY PROGRAMS [PLAIN]}
prog=${2:?usage: valgrind.sh LIBRARY PROGRAMS [PLAIN]}
plain=${3:-}
command -v valgrind >/dev/null 2>&1 || { echo "valgrind not installed"; exit 77; }
unset LD_PRELOAD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() { echo "FAIL $1"; failed=$((failed + 1)); }
pass() { echo "PASS $1"; }

memcheck() { # NAME: runs the program NAME under memcheck, report in $work/NAME
  valgrind --tool=memcheck --soname-synonyms=somalloc=nouserintercepts --trace-children=yes --leak-check=full --show-leak-kinds=definite \
    --error-exitcode=99 --log-file="$work/$1" env LD_PRELOAD="$lib" "$prog" "$1" >"$work/$1.out" 2>&1
}
has() { # NAME TEXT
  if grep -qF -- "$2" "$work/$1"; then pass "$1: $2"; else fail "$1: no '$2' in the report:"; cat "$work/$1"; fi
}

memcheck leak
[ $? = 99 ] && pass "leak: memcheck fails the run" || fail "leak: memcheck did not fail the run"
has leak "64 bytes in 1 blocks are definitely lost"
has leak "kp_track_alloc (in $lib)"
has leak "leak_one (vg_programs.c"
has leak "definitely lost: 64 bytes in 1 blocks"

memcheck uaf
[ $? = 99 ] && pass "uaf: memcheck fails the run" || fail "uaf: memcheck did not fail the run"
has uaf "Invalid read of size 1"
has uaf "use_after_free (vg_programs.c"
has uaf "Address 0x"
has uaf "40 bytes inside a block of size 64 free'd"

memcheck clean
status=$?
[ $status = 0 ] && pass "clean: no errors" || { fail "clean: exit $status"; cat "$work/clean"; }
has clean "ERROR SUMMARY: 0 errors"
has clean.out "clean 3"

if [ -n "$plain" ]; then
  lib=$plain
  memcheck leak
  if grep -qF "definitely lost: 64 bytes" "$work/leak"; then fail "plain: the leak was seen without announcements"
  else pass "plain: without announcements memcheck does not see pool blocks"; fi
fi

echo "$failed failed"
[ "$failed" = 0 ]
