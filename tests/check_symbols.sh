#!/bin/sh
# Checks the dynamic symbols of libkamepoolalloc.so: a preloaded library
# interposes every symbol it exports on the whole program, so it must
# export the malloc family, the kame_pool_* API and nothing else.
#
#   sh tests/check_symbols.sh build/libkamepoolalloc.so [glibc|musl]
#
# Against musl the glibc-only names (its __libc_* aliases, cfree, pvalloc,
# malloc_trim) must not be exported.  NM names the nm to use (a cross
# build's).
set -eu
export LC_ALL=C

lib=${1:?usage: check_symbols.sh path/to/libkamepoolalloc.so [glibc|musl]}
libc=${2:-glibc}
NM=${NM:-nm}
header=$(dirname "$0")/../include/kame_pool.h

if [ ! -f "$lib" ]; then
  echo "check_symbols: $lib does not exist" >&2
  exit 1
fi
command -v "$NM" >/dev/null 2>&1 || { echo "check_symbols: $NM not found (binutils)" >&2; exit 1; }

# The C malloc family: must all be present.
required="malloc free calloc realloc reallocarray memalign posix_memalign
aligned_alloc valloc malloc_usable_size free_sized free_aligned_sized"
glibc_only="pvalloc cfree __libc_malloc __libc_free __libc_calloc __libc_realloc
__libc_memalign __libc_valloc __libc_pvalloc"

# glibc's malloc_trim and introspection calls may be defined to answer for
# the pool too: allowed, not required.
optional=
case $libc in
  glibc) required="$required $glibc_only"; optional="malloc_trim mallinfo mallinfo2 malloc_stats malloc_info mallopt" ;;
  # musl's crti.o and crtn.o, which musl-gcc links into every shared
  # object, define these two globally.
  musl) optional="_init _fini" ;;
  *) echo "check_symbols: unknown C library $libc" >&2; exit 2 ;;
esac

# operator new / delete in every standard form (throwing, nothrow, sized,
# aligned, array): allowed, not required.  @ stands for std::size_t,
# which mangles as m (unsigned long) on 64-bit targets and j (unsigned
# int) on 32-bit ones.
cxx_forms="_Znw@ _Zna@ _Znw@RKSt9nothrow_t _Zna@RKSt9nothrow_t
_Znw@St11align_val_t _Zna@St11align_val_t
_Znw@St11align_val_tRKSt9nothrow_t _Zna@St11align_val_tRKSt9nothrow_t
_ZdlPv _ZdaPv _ZdlPv@ _ZdaPv@ _ZdlPvRKSt9nothrow_t _ZdaPvRKSt9nothrow_t
_ZdlPvSt11align_val_t _ZdaPvSt11align_val_t
_ZdlPv@St11align_val_t _ZdaPv@St11align_val_t
_ZdlPvSt11align_val_tRKSt9nothrow_t _ZdaPvSt11align_val_tRKSt9nothrow_t"
cxx=$(for s in $cxx_forms; do echo "$s" | sed 's/@/m/'; echo "$s" | sed 's/@/j/'; done | sort -u)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# "ADDRESS TYPE NAME[@VERSION]" -> NAME, one per line.
"$NM" -D --defined-only "$lib" | awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' | sort -u >"$tmp/exported"
if [ ! -s "$tmp/exported" ]; then
  echo "check_symbols: nm found no defined dynamic symbols in $lib" >&2
  exit 1
fi

for s in $required $optional $cxx; do echo "$s"; done | sort -u >"$tmp/allowed"
for s in $required; do echo "$s"; done | sort -u >"$tmp/required"
# Every function the public header declares.
if [ -f "$header" ]; then
  # Less the Windows-only declarations (the header's #ifdef _WIN32 blocks).
  sed -e '/^#ifdef _WIN32$/,/^#endif/d' "$header" |
    sed -n 's/.*KAME_POOL_API[^(]*[ *]\(kame_pool_[A-Za-z0-9_]*\)[ ]*(.*/\1/p' | sort -u >"$tmp/api"
else
  : >"$tmp/api"
fi

status=0

# Exported but neither kame_pool_* nor allowed.
grep -v '^kame_pool_' "$tmp/exported" | comm -23 - "$tmp/allowed" >"$tmp/extra" || true
if [ -s "$tmp/extra" ]; then
  echo "FAIL unexpected exported symbols (make them static or hidden):"
  sed 's/^/  /' "$tmp/extra"
  status=1
fi

comm -13 "$tmp/exported" "$tmp/required" >"$tmp/missing"
if [ -s "$tmp/missing" ]; then
  echo "FAIL malloc-family symbols not exported:"
  sed 's/^/  /' "$tmp/missing"
  status=1
fi

comm -13 "$tmp/exported" "$tmp/api" >"$tmp/missing_api"
if [ -s "$tmp/missing_api" ]; then
  echo "FAIL functions declared in kame_pool.h but not exported:"
  sed 's/^/  /' "$tmp/missing_api"
  status=1
fi

# kame_pool_* exported without a declaration is not an error here, but it
# is API nobody can call without declaring it themselves.
grep '^kame_pool_' "$tmp/exported" | comm -23 - "$tmp/api" >"$tmp/undeclared" || true
if [ -s "$tmp/undeclared" ] && [ -s "$tmp/api" ]; then
  echo "note: exported kame_pool_* symbols not declared in kame_pool.h:"
  sed 's/^/  /' "$tmp/undeclared"
fi

# The C++ runtime is bound weakly: a C program that preloads the library
# must not load libstdc++ (about 1 MiB resident) because of it.
if command -v readelf >/dev/null 2>&1 && readelf -d "$lib" | grep -q 'NEEDED.*libstdc++'; then
  echo "FAIL $lib depends on libstdc++ (the operators bind the C++ runtime weakly)"
  status=1
fi

n=$(wc -l <"$tmp/exported")
if [ $status -eq 0 ]; then
  echo "check_symbols: $lib exports $n symbols, all expected"
fi
exit $status
