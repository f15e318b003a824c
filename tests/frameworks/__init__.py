"""Tests of the framework adapters and of tensorfile.safetensors.{flax,tensorflow,mlx,paddle},
each against the real framework (and the reference package where it runs)."""
