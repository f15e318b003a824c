"""The zTensor format, both containers: v1.0 (:mod:`.v1`) and v2 (:mod:`.v2`).

It owns the registry's entry for both, told apart by their magic (:mod:`._hooks`), the choice
of a writer by ``version`` (:mod:`._writer`), what both containers share (the CBOR codec
:mod:`._cbor`, the component codecs and digests :mod:`._codecs`, the atomic appending writer
:mod:`._container_writer`, the checks of what a writer is given :mod:`._inputs`, v1.0's sparse
and extension layouts :mod:`._layouts`), and what the public face :mod:`tensorfile.ztensor`
re-exports (:mod:`.faces`). The two versions never import each other.
"""

from tensorfile.formats.ztensor._codecs import MAX_ZSTD_RATIO

__all__ = ["MAX_ZSTD_RATIO"]
