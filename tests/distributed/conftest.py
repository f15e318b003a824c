"""The modules here whose tests share one group of processes (a module-scoped fixture that
spawns ranks, seconds of CPU each) keep their tests on one worker under ``make test``
(an xdist group per module): else every worker that got one of them would spawn the group
again."""

from __future__ import annotations

import pytest

SHARED = (
    "test_dcp_roundtrip",
    "test_dcp_peers",
    "test_dcp_crash",
    "test_dcp_remote",
    "test_dcp_s3_save",
    "test_rank_load",
    "test_rank_load_remote",
    "test_review38a",
    "test_review38b",
)
PARTLY = {"test_review37a": "group"}
"""Modules where only the tests taking this module-scoped fixture share its processes."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from tests.helpers.workers import join_group

    for item in items:
        folder, _, module = item.nodeid.split("::")[0].rpartition("/")
        name = module.removesuffix(".py")
        if folder != "tests/distributed":
            continue
        if name in SHARED or PARTLY.get(name) in getattr(item, "fixturenames", ()):
            join_group(item, "dcp-" + name)
