"""tensorfile.formats.safetensors: the safetensors format. ``_format`` is the registry's
entry; :mod:`~tensorfile.formats.safetensors.faces` names what the public faces
(:mod:`tensorfile.safetensors` and its framework modules) re-export. Importing this package
imports nothing else, so the registry loads only what a read needs."""
