file(REMOVE_RECURSE
  "libkamepoolalloc.a"
)
