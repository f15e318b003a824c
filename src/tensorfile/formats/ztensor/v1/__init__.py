"""tensorfile.formats.ztensor.v1: see the package docstring of tensorfile.formats.

The manifest codec is the one both containers share, :mod:`tensorfile.formats.ztensor._cbor`;
it is also reachable here, by the name the hostile-header tests import it under.
"""

from tensorfile.formats.ztensor import _cbor as _cbor
