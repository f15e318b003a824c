"""What the plain-install run of the docs examples calls missing (tests/docs/runner.py): an
example is skipped there only for what its first line names and that interpreter lacks."""

from __future__ import annotations

import pytest

from tests.docs.runner import missing


def test_an_installed_extra_is_not_missing() -> None:
    pytest.importorskip("torch")
    assert missing("tensorfile[torch]") == []
    assert missing("numpy") == []


def test_a_package_not_installed_is_missing() -> None:
    assert missing("no-such-package-for-tensorfile>=1") == ["no-such-package-for-tensorfile"]


def test_an_extra_tensorfile_does_not_have_is_an_error() -> None:
    with pytest.raises(AssertionError, match="no extra 'torhc'"):
        missing("tensorfile[torhc]")
