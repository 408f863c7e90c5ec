# x86-64 Linux with musl instead of glibc (Debian's musl-tools: musl-gcc,
# a wrapper that points gcc at musl's headers, start files and libc).
# Its programs run natively.  musl-tools has no C++ runtime: configure
# with -DKAME_POOL_CXX=OFF.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(CMAKE_C_COMPILER musl-gcc)
