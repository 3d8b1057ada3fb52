#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""tools/make_print_fixtures.py: the command; its code and its manual are tools/ctools/make_print_fixtures.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from ctools import make_print_fixtures  # noqa: E402

sys.exit(make_print_fixtures.main())
