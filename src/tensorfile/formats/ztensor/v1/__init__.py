"""tensorfile.formats.ztensor.v1: see the package docstring of tensorfile.formats."""
