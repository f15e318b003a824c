"""Local bytes: files on this machine and bytes already in memory.

It owns :class:`~.local.LocalSource` (positional reads, private mappings, ``O_DIRECT`` through
:mod:`._direct`), the local read policy that chooses between them once per open file
(:mod:`.policy`) and its two probes (the mount table, :mod:`._mounts`; the page cache,
:mod:`._pagecache`), the memory advice every read into fresh buffers takes
(:mod:`.advice`: the HTTP transport's and the chunk cache's too), sources over an open file
object (:mod:`.fileobj`) and over bytes (:mod:`.memory`), the local path rules every
local route obeys (:mod:`.paths`) and folders walked from descriptors, never through a symlink
(:mod:`.tree`: a local store's listing and removal). It imports no other sub-package of
:mod:`tensorfile.sources`.
"""
