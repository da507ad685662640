"""The argparse types of the command line's numeric options, shared by ``mpsolve solve``
(:mod:`mpsolve.cli`) and ``mpsolve bench`` (:mod:`mpsolve.bench.suite`): a bad value is
refused by the parser, which names the option."""
from __future__ import annotations

import argparse

__all__ = ["count", "tolerance"]


def count(text):
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give an integer >= 1")
    return value


def tolerance(text):
    """A number >= 0 (inf: the start is the answer)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:                                  # (NaN too)
        raise argparse.ArgumentTypeError(f"{text}: give a number >= 0")
    return value
