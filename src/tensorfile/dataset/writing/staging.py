"""The names a dataset writer gives what it stages: the staging folder ``_staging``, in it one
folder per write job (``_staging/{job}``, the job named by :func:`new_job`) holding the job's
marker (:data:`JOB_MARKER`) and one folder per task attempt (``task-{id}-{random}``) holding
that task's shards. :func:`~tensorfile.dataset.gc` collects a job's folder only when it is
named and filled so (:mod:`.gc`).

Example:
    >>> bool(JOB_NAME.fullmatch(new_job())), bool(TASK_FOLDER.fullmatch("task-00003-0123456789ab"))
    (True, True)
"""

from __future__ import annotations

import re
import uuid

__all__ = ["JOB_MARKER", "JOB_NAME", "STAGING", "TASK_FOLDER", "new_job"]

STAGING = "_staging"
"""The folder of a dataset where writers stage what they write."""

JOB_MARKER = "_JOB"
"""A file in a job's staging folder while the job lives: :func:`~.writer.start_job` writes it,
a commit or an abort removes it with the folder."""

JOB_NAME = re.compile(r"[0-9a-f]{32}")
"""A write job's name (:func:`new_job`'s), its staging folder's ``_staging/{job}``."""

TASK_FOLDER = re.compile(r"task-[0-9]{5,}-[0-9a-f]{12}")
"""A task attempt's folder in its job's staging folder (:func:`~.writer.staging_folder`'s)."""


def new_job() -> str:
    """A new write job's name (:data:`JOB_NAME`: :func:`~tensorfile.dataset.gc` collects no
    other job's staging folder).

    Example:
        >>> len(new_job())
        32
    """
    return uuid.uuid4().hex
