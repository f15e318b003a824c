"""A dataset handed to other libraries: Arrow (:mod:`.arrow`), Hugging Face ``datasets``
(:mod:`.hf`), Ray Data (:mod:`.ray`) and Dask (:mod:`.dask`). Each loads its library only when
used.
"""
