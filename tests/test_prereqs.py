"""tools/check_prereqs.py, which ``make test`` runs first: each missing piece (Java 17 for
the Spark tests, chromium for the site's smoke test, room for .venv) is one line that says
what to install, and nothing is printed when all is there (issue 36). The checker runs as
``make`` runs it, in a real interpreter, on a ``PATH`` of real programs in a temporary folder
(``java`` there is a script that answers ``-version`` as that Java does)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

CHECKER = Path(__file__).resolve().parent.parent / "tools" / "check_prereqs.py"
JAVA_17 = 'openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment (build 17.0.15+6)'


def program(folder: Path, name: str, stderr: str = "") -> Path:
    """An executable ``folder/bin/name`` that prints ``stderr`` there; returns its folder."""
    path = folder / "bin" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + "".join(f"echo '{line}' >&2\n" for line in stderr.splitlines()))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path.parent


def made(tmp_path: Path) -> Path:
    """A checkout whose .venv is made (so the disk is not checked)."""
    (tmp_path / "checkout" / ".venv").mkdir(parents=True, exist_ok=True)
    (tmp_path / "checkout" / ".venv" / ".dev").touch()
    return tmp_path / "checkout"


def check(
    root: Path, path: list[Path], *, java_home: Path | None = None, wrap: Sequence[str] = ()
) -> tuple[int, list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = os.pathsep.join(map(str, path))
    if java_home is not None:
        env["JAVA_HOME"] = str(java_home)
    done = subprocess.run(
        [*wrap, sys.executable, str(CHECKER), "--root", str(root)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert all(line.startswith("make test: ") for line in lines), lines
    return done.returncode, lines


def test_all_there_is_silent(tmp_path: Path) -> None:
    bin_ = program(tmp_path, "java", JAVA_17)
    program(tmp_path, "chromium")
    assert check(made(tmp_path), [bin_]) == (0, [])


def test_no_java_on_path_names_the_package(tmp_path: Path) -> None:
    bin_ = program(tmp_path, "chromium")
    rc, lines = check(made(tmp_path), [bin_])
    assert rc == 1 and len(lines) == 1, lines
    assert "no `java` on PATH" in lines[0] and "Java 17 or newer (pyspark 4)" in lines[0]
    assert "apt-get install openjdk-17-jre-headless" in lines[0]


@pytest.mark.parametrize(
    ("answer", "major"),
    [('openjdk version "11.0.2" 2019-01-15', 11), ('java version "1.8.0_292"', 8)],
)
def test_an_old_java_is_named_with_its_version(tmp_path: Path, answer: str, major: int) -> None:
    bin_ = program(tmp_path, "java", answer)
    program(tmp_path, "chromium")
    rc, lines = check(made(tmp_path), [bin_])
    assert rc == 1 and len(lines) == 1, lines
    assert f"{bin_ / 'java'} (from PATH) is Java {major};" in lines[0]
    assert "openjdk-17-jre-headless" in lines[0]


def test_java_home_comes_first_as_in_pyspark(tmp_path: Path) -> None:
    old = program(tmp_path / "path", "java", 'openjdk version "11.0.2"')
    program(tmp_path / "path", "chromium")
    home = program(tmp_path / "jdk", "java", JAVA_17).parent
    assert check(made(tmp_path), [old], java_home=home) == (0, [])
    rc, lines = check(made(tmp_path), [old], java_home=tmp_path / "nowhere")
    assert rc == 1 and len(lines) == 1, lines
    assert f"there is no {tmp_path / 'nowhere' / 'bin' / 'java'} (from JAVA_HOME=" in lines[0]


def as_nobody() -> list[str]:
    """A prefix that runs a command with another effective user than root (a user namespace
    of its own, which can still read root's files), or none when this is not root."""
    if os.geteuid() != 0:
        return []
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--user", "true"]).returncode:
        pytest.skip("running as root, and unshare cannot start a user namespace here")
    return [unshare, "--user"]


def test_chromium_missing_needs_root_or_a_line_saying_what_to_install(tmp_path: Path) -> None:
    bin_ = program(tmp_path, "java", JAVA_17)
    program(tmp_path, "apt-get")
    rc, lines = check(made(tmp_path), [bin_], wrap=as_nobody())
    assert rc == 1 and len(lines) == 1, lines
    assert "no `chromium` on PATH" in lines[0] and "sudo apt-get install chromium" in lines[0]
    if os.geteuid() == 0:  # root with apt-get: the Makefile's browser target installs it
        assert check(made(tmp_path), [bin_]) == (0, [])


def on_a_tmpfs(tmp_path: Path, size: str) -> subprocess.CompletedProcess[str]:
    """The checker on a checkout without .venv that is a tmpfs of ``size`` (mounted in a mount
    namespace of its own, so the test owns the free space it sees and no machine's /tmp does)."""
    unshare, mount = shutil.which("unshare"), shutil.which("mount")
    if unshare is None or mount is None:
        pytest.skip("no unshare and mount to mount a filesystem of a chosen size with")
    bin_ = program(tmp_path, "java", JAVA_17)
    program(tmp_path, "chromium")
    folder = tmp_path / f"tmpfs-{size}"
    folder.mkdir()
    env = {**os.environ, "PATH": str(bin_)}
    script = f'"$1" -t tmpfs -o size={size} none "$2" && shift 2 && exec "$@"'
    done = subprocess.run(
        [unshare, "--user", "--map-root-user", "--mount", "/bin/sh", "-c", script, "sh",
         mount, str(folder), sys.executable, str(CHECKER), "--root", str(folder)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if "mount" in done.stderr and "make test:" not in done.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    return done


def test_too_little_room_for_the_venv(tmp_path: Path) -> None:
    """A 1 MiB filesystem gets one line naming the room .venv needs and the room there is."""
    done = on_a_tmpfs(tmp_path, "1m")
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1, done.stderr
    assert ".venv takes about 6 GB" in done.stderr and "make room for 7 GB" in done.stderr
    assert f"{tmp_path / 'tmpfs-1m'} has 0.00 GB free" in done.stderr


def test_room_enough_for_the_venv_is_silent(tmp_path: Path) -> None:
    """A 64 GiB tmpfs (a limit only: tmpfs takes memory as it is written) has room enough."""
    done = on_a_tmpfs(tmp_path, "64g")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_readme_and_the_site_name_what_the_checker_asks_for() -> None:
    from tools.check_prereqs import JAVA_PACKAGE

    root = CHECKER.parent.parent
    for page in (root / "README.md", root / "docs" / "getting-started.md"):
        text = " ".join(page.read_text(encoding="utf-8").split())
        assert f"apt-get install {JAVA_PACKAGE}" in text, page
        assert "sudo apt-get install chromium" in text and "about 6 GB" in text, page
        assert "tools/check_prereqs.py" in text, page
