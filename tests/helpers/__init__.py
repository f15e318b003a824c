"""Helpers shared by the tests, one module per concern (import them as ``tests.helpers.X``).

* :mod:`.samples`: sample tensors of every dtype, ``assert_same`` and sample (row)
  comparisons, float bit patterns.
* :mod:`.checkpoints`: model files the tests write and parse by hand (safetensors, zTensor,
  GGUF, sharded checkpoints), folder listings and snapshots.
* :mod:`.manifests`: a dataset's ``dataset_manifest.json``: the spec's JSON schema (the one
  copy is ``manifest-jsonschema.json`` next to this file) and the consistency checks.
* :mod:`.weight_inspect`: an independent reference of weight-inspect's structural hash.
* :mod:`.cli`: running the ``tensorfile`` command and checking its output contract.
* :mod:`.servers`: real HTTP servers on 127.0.0.1 (nginx, a Range-honouring Python server,
  a Range-ignoring one); pytest fixtures wrap them in the folders' ``conftest.py``.
* :mod:`.hostile_http`: HTTP servers that lie, drip or stall on purpose, a forwarding
  proxy (plain and CONNECT), a self-signed certificate for HTTPS on 127.0.0.1.
* :mod:`.spark`: the Spark data source's reader and writer calls.

Everything here is written from the specs and the peers' behaviour, not from tensorfile's
code.
"""
