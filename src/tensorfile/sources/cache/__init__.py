"""The local cache of remote bytes: one folder, one size limit, one lock and one LRU over
two kinds of entries.

It owns the settings read from the environment (:mod:`.settings`, the only module that reads
``$TENSORFILE_CACHE_*``), the folder's budget (:mod:`.folder`: reserving room, evicting the
least recently used entries of either kind, healing what is not a regular file), its files
at the system level (:mod:`.files`: fork-safe lock descriptors, opens that never block,
records), chunks of remote files (:mod:`._chunkdir`, :mod:`._chunkcache`:
:class:`~._chunkcache.CachedSource`) and whole files downloaded once and read locally
(:mod:`.entries`: a dataset's shards).
"""
