"""``python -m scarjax``: the command line (:func:`scarjax.cli.main`), the same as the
``scarjax`` script, for environments where the script is not on ``PATH``."""

import sys

from scarjax.cli import main

if __name__ == "__main__":
    sys.exit(main())
