# 64-bit Arm Linux (glibc) with Debian's cross compilers
# (gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu for the C++ layer;
# configure with -DKAME_POOL_CXX=OFF without the latter); the tests run
# under qemu-user (qemu-user-static), which finds the target's loader and
# libraries, libstdc++ among them, under /usr/aarch64-linux-gnu.
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(KP_CROSS_TRIPLE aarch64-linux-gnu)
include(${CMAKE_CURRENT_LIST_DIR}/debian-cross.cmake)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static -L /usr/aarch64-linux-gnu)
