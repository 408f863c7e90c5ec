# Empty dependencies file for kp_cxx_static.
# This may be replaced when dependencies are built.
