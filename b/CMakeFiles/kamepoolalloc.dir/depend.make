# Empty dependencies file for kamepoolalloc.
# This may be replaced when dependencies are built.
