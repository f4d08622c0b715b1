"""Translators, one small function per aten op, grouped by kind. Importing registers them."""

from . import elementwise  # noqa: F401
from . import reduction, normalization  # noqa: F401
from . import shape, creation, linalg  # noqa: F401
