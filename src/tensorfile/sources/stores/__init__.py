"""Stores: folders of files that hand out byte ranges and, where they can, write, list and
delete.

It owns the :class:`~.store.Store` interface (:mod:`.store`) and its implementations: a
local folder (:mod:`.local_store`), files in memory (:mod:`.memory_store`) and any fsspec
filesystem (:mod:`.fsspec_store`), with fsspec's Source (:mod:`.fsspec_source`) and the one
place fsspec's exceptions become tensorfile's (:mod:`._fsspec`). fsspec loads only when an
fsspec store or source is used.
"""
