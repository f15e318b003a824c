"""The shard cache of remote datasets: which shard, keyed by the dataset's location and
manifest (:mod:`.shardcache`), downloaded whole and checked against the manifest
(:mod:`._shardfetch`), over the cache folder of :mod:`tensorfile.sources.cache` (one limit,
one LRU and one lock protocol shared with the chunks of remote files).
"""
