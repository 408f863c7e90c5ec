# Empty compiler generated dependencies file for kamepoolalloc_static.
# This may be replaced when dependencies are built.
