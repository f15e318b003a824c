"""The shard cache: whole shards of remote datasets in a local folder shared by a node's
processes.

It owns the cache (:mod:`.shardcache`: the size limit, LRU eviction, locks), its files at the
system level (:mod:`._cachefiles`) and the download of one whole shard (:mod:`._shardfetch`).
"""
