"""zTensor v2: the container ztensor 2.x writes (magic ``89 5A 54 32 0D 0A 1A 0A``).

It owns the frame and vocabulary of the spec (:mod:`._format`), opening a container (footer,
manifest bounds, XXH3-64, the deterministic-CBOR parse: :mod:`._container`), the manifest's
validation rules (:mod:`._manifest`), decoding parts into values (:mod:`._decode`), the
seekable zstd profile (:mod:`._seekable`), the reader (:mod:`._reader`) and the writer with
its placement of blobs (:mod:`._writer`, :mod:`._placement`).
"""
