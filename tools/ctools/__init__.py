# SPDX-License-Identifier: MIT
"""ctools: the project's Python tools as one package.

Each command in tools/ (book, weave, bench, lab, gpu-check, record, launch,
flagfuzz, fuzz, make_print_fixtures.py) is a thin entry script that puts
tools/ on sys.path, imports its module from here and calls its main, as the
module's own `if __name__ == "__main__"` block does; the modules import one another
(`from . import weave`) instead of loading files by path. Tests import them
the same way: put tools/ on sys.path, then `from ctools import bench`.
"""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fresh(name):
    """ctools.NAME imported anew: a test that sets the module's globals (time limits, folders)
    starts from the module as written, not from what an earlier check left in it."""
    import importlib
    import sys
    sys.modules.pop(f"{__name__}.{name}", None)
    return importlib.import_module(f"{__name__}.{name}")
