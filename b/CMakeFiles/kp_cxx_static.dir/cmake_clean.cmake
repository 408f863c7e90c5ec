file(REMOVE_RECURSE
  "CMakeFiles/kp_cxx_static.dir/src/new_delete.cpp.o"
  "CMakeFiles/kp_cxx_static.dir/src/new_delete.cpp.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/kp_cxx_static.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
