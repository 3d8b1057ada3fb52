# SPDX-License-Identifier: MIT
"""Small text helpers that several tools share (one copy each, imported where used)."""
import math
import re


def cell(s):
    """s as a Markdown table cell: '|' escaped, newlines as spaces."""
    return str(s).replace("|", "\\|").replace("\n", " ")


def finite(x):
    """x is a finite int or float (not a bool, not None, not nan or inf)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def slug(text):
    """text in lower case with every run of other characters than a-z and 0-9 as one '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def strip_md(s):
    """s without Markdown's emphasis and code marks (` * _)."""
    return re.sub(r"[`*_]", "", s)
