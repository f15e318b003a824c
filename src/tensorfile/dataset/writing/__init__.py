"""Writing a dataset: a table in, shards and a manifest out.

It owns the write options shared with Spark (:mod:`.options`), a table turned into per-sample
tensor columns (:mod:`.columns`), columns cut into shards (:mod:`.shards`), the names of what
writers stage (:mod:`.staging`), the writer with its commit protocol (:mod:`.writer`), and
the collection of what killed writers left (:mod:`.gc`). It builds on
:mod:`tensorfile.dataset.layout`.
"""
