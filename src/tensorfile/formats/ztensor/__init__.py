"""tensorfile.formats.ztensor: see the package docstring of tensorfile.formats."""
