# What the toolchain files for Debian's Linux cross compilers share: the
# compilers named by their triple (KP_CROSS_TRIPLE, set by the includer),
# and the target's files under /usr/<triple>.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_C_COMPILER ${KP_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${KP_CROSS_TRIPLE}-g++)
set(CMAKE_FIND_ROOT_PATH /usr/${KP_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
