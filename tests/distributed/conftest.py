"""The modules here whose tests share one group of processes (a module-scoped fixture that
spawns ranks, seconds of CPU each) keep their tests on one worker under ``make test``
(an xdist group per module): else every worker that got one of them would spawn the group
again."""

from __future__ import annotations

from typing import Any

import pytest

SHARED = (
    "test_dcp_roundtrip",
    "test_dcp_peers",
    "test_dcp_crash",
    "test_dcp_remote",
    "test_dcp_s3_save",
    "test_rank_load",
    "test_rank_load_remote",
    "test_rank_load_kill",
    "test_review38a",
    "test_review38b",
)
PARTLY = {"test_review37a": "group"}
"""Modules where only the tests taking this module-scoped fixture share its processes."""
TOGETHER = {"test_rank_load_remote": "test_rank_load"}
"""Modules whose group is another module's: they share its processes (a session fixture)."""


@pytest.fixture(scope="session")
def rank_load(tmp_path_factory: pytest.TempPathFactory, s3: Any) -> Any:
    """One group of 4 ranks that ran every load of ``test_rank_load`` and then of
    ``test_rank_load_remote`` (``test_rank_load_remote.make_setup``): the two modules share
    its processes (and a worker, under ``make test``)."""
    from tests.distributed.test_rank_load_remote import make_setup

    return make_setup(tmp_path_factory, s3)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from tests.helpers.workers import join_group

    for item in items:
        folder, _, module = item.nodeid.split("::")[0].rpartition("/")
        name = module.removesuffix(".py")
        if folder != "tests/distributed":
            continue
        if name in SHARED or PARTLY.get(name) in getattr(item, "fixturenames", ()):
            join_group(item, "dcp-" + TOGETHER.get(name, name))
