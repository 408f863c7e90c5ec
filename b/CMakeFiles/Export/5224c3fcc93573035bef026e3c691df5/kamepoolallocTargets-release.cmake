#----------------------------------------------------------------
# Generated CMake target import file for configuration "Release".
#----------------------------------------------------------------

# Commands may need to know the format version.
set(CMAKE_IMPORT_FILE_VERSION 1)

# Import target "kamepoolalloc::kamepoolalloc_shared" for configuration "Release"
set_property(TARGET kamepoolalloc::kamepoolalloc_shared APPEND PROPERTY IMPORTED_CONFIGURATIONS RELEASE)
set_target_properties(kamepoolalloc::kamepoolalloc_shared PROPERTIES
  IMPORTED_LOCATION_RELEASE "${_IMPORT_PREFIX}/lib/libkamepoolalloc.so.0.1.0"
  IMPORTED_SONAME_RELEASE "libkamepoolalloc.so.0"
  )

list(APPEND _cmake_import_check_targets kamepoolalloc::kamepoolalloc_shared )
list(APPEND _cmake_import_check_files_for_kamepoolalloc::kamepoolalloc_shared "${_IMPORT_PREFIX}/lib/libkamepoolalloc.so.0.1.0" )

# Import target "kamepoolalloc::kamepoolalloc_static" for configuration "Release"
set_property(TARGET kamepoolalloc::kamepoolalloc_static APPEND PROPERTY IMPORTED_CONFIGURATIONS RELEASE)
set_target_properties(kamepoolalloc::kamepoolalloc_static PROPERTIES
  IMPORTED_LINK_INTERFACE_LANGUAGES_RELEASE "C;CXX"
  IMPORTED_LOCATION_RELEASE "${_IMPORT_PREFIX}/lib/libkamepoolalloc.a"
  )

list(APPEND _cmake_import_check_targets kamepoolalloc::kamepoolalloc_static )
list(APPEND _cmake_import_check_files_for_kamepoolalloc::kamepoolalloc_static "${_IMPORT_PREFIX}/lib/libkamepoolalloc.a" )

# Commands beyond this point should not need to know the version.
set(CMAKE_IMPORT_FILE_VERSION)
