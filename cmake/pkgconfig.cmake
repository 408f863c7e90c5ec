# Writes kamepoolalloc.pc and kamepoolalloc-static.pc for the prefix being
# installed to.  Run by `cmake --install` (see CMakeLists.txt), which sets
# CMAKE_INSTALL_PREFIX and the KP_PC_* variables.
#
# kamepoolalloc.pc links the shared library, with --no-as-needed so that
# a program calling none of its functions (it allocates through strdup or
# new) still depends on it: --as-needed, gcc's default on Debian, would
# drop it.  When its directory is not
# one the dynamic loader searches by itself (/usr/local/lib, /opt/..., a
# home directory), Libs carries an rpath to it, so that the program built
# from `pkg-config --libs` starts without LD_LIBRARY_PATH or ldconfig.
# Libs.private names the override's anchors (-u), which `--static` adds
# for a program linked with -static.
#
# kamepoolalloc-static.pc links the archive into a program that is
# otherwise dynamically linked, with the same anchors.

set(KP_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")

foreach(kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${KP_PC_${kind}}")
    set(KP_PC_${kind}_FULL "${KP_PC_${kind}}")
    set(KP_PC_${kind}_PC "${KP_PC_${kind}}")
  else()
    set(KP_PC_${kind}_FULL "${KP_PC_PREFIX}/${KP_PC_${kind}}")
    set(KP_PC_${kind}_PC "\${prefix}/${KP_PC_${kind}}")
  endif()
endforeach()

# The directories ld.so searches when a program names no path.
set(loader_dirs /lib /usr/lib /lib64 /usr/lib64)
if(KP_PC_ARCH)
  list(APPEND loader_dirs /lib/${KP_PC_ARCH} /usr/lib/${KP_PC_ARCH})
endif()
get_filename_component(libdir_abs "${KP_PC_LIBDIR_FULL}" ABSOLUTE)
string(REGEX REPLACE "/+$" "" libdir_abs "${libdir_abs}")
# (list(FIND): an install script runs without the project's policies.)
list(FIND loader_dirs "${libdir_abs}" found)
if(found GREATER -1)
  set(KP_PC_RPATH "")
else()
  set(KP_PC_RPATH " -Wl,-rpath,\${libdir}")
endif()

foreach(pc kamepoolalloc kamepoolalloc-static)
  configure_file("${KP_PC_SOURCE_DIR}/${pc}.pc.in" "${KP_PC_OUT_DIR}/${pc}.pc" @ONLY)
endforeach()
