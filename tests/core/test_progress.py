"""Progress of long loads on a terminal (issue 25): shown on a real pseudo-terminal, after
its delay, redrawn in place and finished with a summary; silent when stderr is no terminal,
when ``TENSORFILE_PROGRESS=0``, before the delay, and inside another shown task."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from tensorfile.core import progress


def _run(code: str, *, tty: bool, env: dict[str, str] | None = None) -> str:
    """Run ``code`` in a fresh interpreter with its stderr on a pseudo-terminal (``tty``)
    or a pipe; return what it wrote there."""
    environ = {k: v for k, v in os.environ.items() if k != progress.ENV}
    environ.update(env or {})
    code = textwrap.dedent(code)
    if not tty:
        done = subprocess.run(
            [sys.executable, "-c", code], env=environ, capture_output=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stderr.decode()
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", code], env=environ, stderr=slave, stdout=subprocess.DEVNULL
        )
    finally:
        os.close(slave)
    out = b""
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not data:
                break
            out += data
    finally:
        os.close(master)
    assert proc.wait(timeout=60) == 0, out
    return out.decode()


_LOAD = """
    import time
    from tensorfile.core import progress
    with progress.task(2_000_000_000, "loading model.safetensors", delay={delay}) as p:
        for _ in range(8):
            p.advance(250_000_000)
            time.sleep(0.1)
"""


def test_a_long_load_on_a_terminal_shows_bytes_and_rate_then_a_summary() -> None:
    out = _run(_LOAD.format(delay=0.2), tty=True)
    assert "\rloading model.safetensors: " in out
    assert " / 2.00 GB (" in out and "GB/s" in out
    assert out.count("\r") >= 3  # redrawn in place, a few times a second
    last = out.rstrip("\r\n").rsplit("\r", 1)[-1]
    assert last.startswith("loading model.safetensors: 2.00 GB, ") and " in 0." in last
    assert out.endswith("\n")


def test_a_load_shorter_than_the_delay_shows_nothing_even_on_a_terminal() -> None:
    assert _run(_LOAD.format(delay=progress.DELAY), tty=True) == ""


def test_silent_when_stderr_is_no_terminal_or_turned_off() -> None:
    assert _run(_LOAD.format(delay=0.1), tty=False) == ""
    assert _run(_LOAD.format(delay=0.1), tty=True, env={progress.ENV: "0"}) == ""


def test_forced_on_where_stderr_is_a_pipe() -> None:
    out = _run(_LOAD.format(delay=0.1), tty=False, env={progress.ENV: "1"})
    assert "loading model.safetensors: 2.00 GB, " in out and out.endswith("\n")


def test_a_failed_load_erases_its_line() -> None:
    out = _run(
        """
        import time
        from tensorfile.core import progress
        try:
            with progress.task(10, "doomed", delay=0.05) as p:
                time.sleep(0.4)
                raise KeyError
        except KeyError:
            pass
        """,
        tty=True,
    )
    assert "doomed: " in out and out.endswith("\r\x1b[K") and " in " not in out


def test_a_nested_task_draws_nothing_of_its_own() -> None:
    out = _run(
        """
        import time
        from tensorfile.core import progress
        with progress.task(100, "outer", delay=0.05) as outer:
            with progress.task(50, "inner", delay=0.0) as inner:
                inner.advance(50)
                time.sleep(0.3)
            outer.advance(100)
        """,
        tty=True,
    )
    assert "outer: " in out and "inner" not in out


def test_counts_from_many_threads_add_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(progress.ENV, "1")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with progress.task(0, "many", delay=60) as p:
        threads = [
            threading.Thread(target=lambda: [p.advance(3) for _ in range(20_000)]) for _ in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert p.done == 8 * 20_000 * 3
    assert sys.stderr.getvalue() == ""  # ended before its delay: nothing drawn
    assert [t.name for t in threading.enumerate() if t.name == "tensorfile-progress"] == []


@pytest.mark.parametrize(
    ("value", "tty", "shown"),
    [("", False, False), ("", True, True), ("0", True, False), ("off", True, False),
     ("1", False, True), ("yes", False, True)],
)  # fmt: skip
def test_enabled(monkeypatch: pytest.MonkeyPatch, value: str, tty: bool, shown: bool) -> None:
    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return tty

    monkeypatch.setenv(progress.ENV, value)
    assert progress.enabled(Stream()) is shown


def test_off_is_one_shared_silent_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(progress.ENV, "0")
    a, b = progress.task(1), progress.task(2)
    assert a is b and type(a) is progress.Task
    with a as p:
        p.advance(5)
    assert p.done == 0
