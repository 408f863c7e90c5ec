# 32-bit x86 Linux (glibc) with Debian's cross compilers
# (gcc-i686-linux-gnu, g++-i686-linux-gnu for the C++ layer; configure
# with -DKAME_POOL_CXX=OFF without the latter).  Its programs run natively
# on an x86-64 kernel.
set(CMAKE_SYSTEM_PROCESSOR i686)
set(KP_CROSS_TRIPLE i686-linux-gnu)
include(${CMAKE_CURRENT_LIST_DIR}/debian-cross.cmake)
