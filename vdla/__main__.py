"""``python -m vdla``: the ``vdla`` command (:func:`vdla.cli.main`), for an environment without its script."""

import sys

if __name__ == "__main__":
    from vdla.cli import main

    sys.exit(main())
