"""The ``tensorfile`` command line (see :mod:`tensorfile.cli.app`)."""
