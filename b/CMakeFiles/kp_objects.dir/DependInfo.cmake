
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/addrmap.c" "CMakeFiles/kp_objects.dir/src/addrmap.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/addrmap.c.o.d"
  "/work/main/src/alloc.c" "CMakeFiles/kp_objects.dir/src/alloc.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/alloc.c.o.d"
  "/work/main/src/api.c" "CMakeFiles/kp_objects.dir/src/api.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/api.c.o.d"
  "/work/main/src/check.c" "CMakeFiles/kp_objects.dir/src/check.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/check.c.o.d"
  "/work/main/src/cxx_bridge.c" "CMakeFiles/kp_objects.dir/src/cxx_bridge.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/cxx_bridge.c.o.d"
  "/work/main/src/free.c" "CMakeFiles/kp_objects.dir/src/free.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/free.c.o.d"
  "/work/main/src/heap.c" "CMakeFiles/kp_objects.dir/src/heap.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/heap.c.o.d"
  "/work/main/src/large.c" "CMakeFiles/kp_objects.dir/src/large.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/large.c.o.d"
  "/work/main/src/mapping.c" "CMakeFiles/kp_objects.dir/src/mapping.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/mapping.c.o.d"
  "/work/main/src/options.c" "CMakeFiles/kp_objects.dir/src/options.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/options.c.o.d"
  "/work/main/src/os_linux.c" "CMakeFiles/kp_objects.dir/src/os_linux.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/os_linux.c.o.d"
  "/work/main/src/override_linux.c" "CMakeFiles/kp_objects.dir/src/override_linux.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/override_linux.c.o.d"
  "/work/main/src/recycle.c" "CMakeFiles/kp_objects.dir/src/recycle.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/recycle.c.o.d"
  "/work/main/src/region.c" "CMakeFiles/kp_objects.dir/src/region.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/region.c.o.d"
  "/work/main/src/release.c" "CMakeFiles/kp_objects.dir/src/release.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/release.c.o.d"
  "/work/main/src/remote.c" "CMakeFiles/kp_objects.dir/src/remote.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/remote.c.o.d"
  "/work/main/src/size_class.c" "CMakeFiles/kp_objects.dir/src/size_class.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/size_class.c.o.d"
  "/work/main/src/sys_alloc.c" "CMakeFiles/kp_objects.dir/src/sys_alloc.c.o" "gcc" "CMakeFiles/kp_objects.dir/src/sys_alloc.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
