#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/make_print_fixtures.py: runs tools/ctools/make_print_fixtures.py (its docstring is the manual) as __main__."""
import os
import runpy
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
runpy.run_module("ctools.make_print_fixtures", run_name="__main__")
