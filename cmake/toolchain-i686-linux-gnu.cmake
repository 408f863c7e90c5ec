# 32-bit x86 Linux (glibc) with Debian's cross compilers
# (gcc-i686-linux-gnu, g++-i686-linux-gnu for the C++ layer; configure
# with -DKAME_POOL_CXX=OFF without the latter).  Its programs run natively
# on an x86-64 kernel built with 32-bit support.  On one without it (the
# target's loader fails to start) they run under qemu-user
# (qemu-user-static), started through the target's loader: Debian 12's
# qemu-i386 started on the program itself loops forever in the first
# pthread_create.
set(CMAKE_SYSTEM_PROCESSOR i686)
set(KP_CROSS_TRIPLE i686-linux-gnu)
include(${CMAKE_CURRENT_LIST_DIR}/debian-cross.cmake)
set(kp_i686_loader /usr/${KP_CROSS_TRIPLE}/lib/ld-linux.so.2)
execute_process(COMMAND ${kp_i686_loader} --version
                RESULT_VARIABLE kp_i686_native OUTPUT_QUIET ERROR_QUIET)
if(NOT kp_i686_native EQUAL 0)
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-i386-static ${kp_i686_loader}
      --library-path /usr/${KP_CROSS_TRIPLE}/lib)
endif()
