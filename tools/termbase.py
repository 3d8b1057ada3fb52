#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/termbase.py: the command; its code and its manual are tools/ctools/termbase.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from ctools import termbase  # noqa: E402

sys.exit(termbase.main(sys.argv))
