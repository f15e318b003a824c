"""The local cache of remote files, chunk by chunk.

It owns :class:`~._chunkcache.CachedSource` (reads served from cached chunks, the missing
ones fetched) and its folder (:mod:`._chunkdir`): the settings read from the environment,
where a file's chunks live, what a chunk file holds, and how the folder stays under its
size limit.
"""
