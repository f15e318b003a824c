"""The tensorfile test suite: one folder per part of ``src/tensorfile``, helpers in
:mod:`tests.helpers`."""
