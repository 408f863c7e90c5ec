# Configures the library for arm64 macOS against the stand-in declarations
# of tests/darwin/include, to check the macOS wiring of CMakeLists.txt and
# compile the library's objects (target kp_objects).  Nothing can be
# linked: there is no SDK (tests/darwin/README.md).  Used by
# tests/check_macos.sh.
set(CMAKE_SYSTEM_NAME Darwin)
set(CMAKE_SYSTEM_PROCESSOR arm64)
set(CMAKE_OSX_ARCHITECTURES arm64)
set(CMAKE_OSX_DEPLOYMENT_TARGET 11.0)
set(CMAKE_OSX_SYSROOT "")
set(CMAKE_C_COMPILER clang)
set(CMAKE_C_COMPILER_TARGET arm64-apple-macos11)
set(CMAKE_C_FLAGS_INIT "-nostdlibinc -isystem ${CMAKE_CURRENT_LIST_DIR}/include")
# The compiler checks build a static library instead of a program.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
