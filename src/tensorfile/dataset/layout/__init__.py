"""The layout of a dataset on its store: what the files are and what they say.

It owns ``dataset_manifest.json`` (:mod:`.manifest`, its JSON checks :mod:`._json`, its dtypes
:mod:`.spec_dtypes`), ``_tensor_index.parquet`` (:mod:`.index`), the reference connector's
layout (:mod:`.reference`), the files of a dataset folder touched without trusting them
(:mod:`.files`) and where a dataset lives (:mod:`.storage`). It imports no other
sub-package of :mod:`tensorfile.dataset`.
"""
