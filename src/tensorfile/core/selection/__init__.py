"""Selections: the parts of many tensors a reader is asked for, read in one planned pass.

A plan maps tensor names to what is wanted of each (numpy basic indexing, or several
intervals of one dimension concatenated, as tensor-parallel layouts of fused weights need).
:mod:`.region` turns one entry into a :class:`Region` (per dimension, the intervals read;
then an index applied to that box); :mod:`.runs` finds where a region's elements lie in a
C-ordered tensor's bytes and copies regions between arrays; :mod:`.read` reads many regions
of many tensors (of one file or a checkpoint's shards) with the read planner, straight into
their destinations.

Example:
    >>> from tensorfile.core.selection import Intervals, region
    >>> r = region((6, 4), Intervals(0, [(0, 1), (3, 5)]))
    >>> r.box_shape, r.result_shape
    ((3, 4), (3, 4))
"""

from .region import Intervals, Region, region

__all__ = ["Intervals", "Region", "region"]
