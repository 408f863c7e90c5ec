file(REMOVE_RECURSE
  "CMakeFiles/kp_cxx_shared.dir/src/new_delete.cpp.o"
  "CMakeFiles/kp_cxx_shared.dir/src/new_delete.cpp.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/kp_cxx_shared.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
