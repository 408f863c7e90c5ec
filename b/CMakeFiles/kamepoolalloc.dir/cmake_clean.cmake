file(REMOVE_RECURSE
  "libkamepoolalloc.pdb"
  "libkamepoolalloc.so"
  "libkamepoolalloc.so.0"
  "libkamepoolalloc.so.0.1.0"
)

# Per-language clean rules from dependency scanning.
foreach(lang C CXX)
  include(CMakeFiles/kamepoolalloc.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
