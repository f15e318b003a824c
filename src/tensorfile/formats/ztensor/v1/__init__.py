"""zTensor v1.0: the manifest, the reader and the writer of the v1.0 container (the codec
and the container writer are shared with v2, one folder up)."""
