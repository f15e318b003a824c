"""tensorfile.formats.safetensors: see the package docstring of tensorfile.formats."""
