# Empty dependencies file for kp_objects.
# This may be replaced when dependencies are built.
