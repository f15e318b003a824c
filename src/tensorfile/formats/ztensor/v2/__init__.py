"""tensorfile.formats.ztensor.v2: see the package docstring of tensorfile.formats."""
