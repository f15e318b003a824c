"""The feed: a dataset's samples as training batches.

It owns the epoch order (:mod:`.order`: a function of the shards, the seed and the epoch
only), the torch feed (:mod:`.torch`), how an epoch is split between ranks and workers and
its resume state (:mod:`.torch_state`), batches gathered as torch tensors
(:mod:`.torch_batches`), what DataLoader workers share with their parent
(:mod:`.torch_sync`), and mixtures of datasets with weights (:mod:`.mixture`, their order
:mod:`.mix_order`, their feed :mod:`.torch_mixture`). torch loads only when the torch modules
are used.
"""
