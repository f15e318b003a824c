"""The ``tensorfile`` command line: its arguments, what each command prints, and how an
error is told.

It owns the entry point (:mod:`.app`), the parser with each command's ``--help``
(:mod:`._parser`), one module per command rendering what :mod:`tensorfile.ops` returns
(``inspect``, ``id``/``summary``, ``diff``, ``meta``, ``convert``, ``verify``, ``samples``),
where output goes (:mod:`._output`, :mod:`._progress`) and how errors are told
(:mod:`._errors`). The work itself is done by :mod:`tensorfile.ops`.
"""
