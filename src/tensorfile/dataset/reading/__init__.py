"""Reading a dataset: the :class:`~.reader.Dataset` and the samples of its shards.

It owns :class:`~.reader.Dataset` and :func:`~.reader.open` (:mod:`.reader`), the samples of
one shard checked against the manifest (:mod:`.samples`), and a remote dataset streamed
through its shard cache: shards opened from the cache, the next ones downloaded in the
background (:mod:`._stream`, :mod:`._prefetch`).
"""
