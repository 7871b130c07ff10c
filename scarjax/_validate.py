"""The old name of :mod:`scarjax.validate` (the argument checks are public: every
subpackage uses them). Kept only so that code written against the old name still imports
while it is being moved over; ``tests/test_layout.py`` reports every use of it outside
``scarjax/*.py``. Delete once nothing imports it."""

from scarjax.validate import *  # noqa: F401,F403
from scarjax.validate import __all__  # noqa: F401
