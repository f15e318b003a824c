"""Tests of :mod:`tensorfile.distributed` (issue 37): checkpoints saved and loaded through
``torch.distributed.checkpoint`` by real gloo ranks (:mod:`tests.distributed._ranks`)."""
