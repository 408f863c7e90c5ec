file(REMOVE_RECURSE
  "libkamepoolalloc.a"
  "libkamepoolalloc.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C CXX)
  include(CMakeFiles/kamepoolalloc_static.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
