"""The version of tensorfile, importable by every part without importing the package face."""

__version__ = "0.1.0"
