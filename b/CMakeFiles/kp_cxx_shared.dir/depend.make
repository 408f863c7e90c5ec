# Empty dependencies file for kp_cxx_shared.
# This may be replaced when dependencies are built.
