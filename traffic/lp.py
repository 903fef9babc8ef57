"""Linear programmes on HiGHS (highspy), the one module that imports it: a model that prints
nothing, and its outcome.

HiGHS prints its banner on stdout when a process makes its first model, whatever the
model's options say, which would break the commands' ``--json`` output; ``model`` makes
that first one with stdout pointed at /dev/null.

>>> lp = model()
>>> _ = lp.addVar(0.0, 2.0), lp.changeColCost(0, -1.0)
>>> solved(lp), lp.getSolution().col_value
(True, [2.0])
"""

from __future__ import annotations

import os
import sys

import highspy

#: Infinity as HiGHS takes it (a bound that is not there).
INF = highspy.kHighsInf

_quiet = False  # whether a model was made already (the banner is printed once)


def model() -> highspy.Highs:
    """An empty HiGHS model (minimising) whose solves print nothing."""
    global _quiet
    if _quiet:
        lp = highspy.Highs()
    else:
        sys.stdout.flush()
        try:
            saved = os.dup(1)
        except OSError:  # no stdout: nothing to keep clean
            saved = None
        try:
            if saved is not None:
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.close(null)
            lp = highspy.Highs()
        finally:
            if saved is not None:
                os.dup2(saved, 1)
                os.close(saved)
        _quiet = True
    lp.setOptionValue("output_flag", False)
    return lp


def solved(lp: highspy.Highs) -> bool:
    """Run ``lp``: whether HiGHS found an optimum."""
    return (lp.run() == highspy.HighsStatus.kOk
            and lp.getModelStatus() == highspy.HighsModelStatus.kOptimal)


def outcome(lp: highspy.Highs) -> str:
    """What HiGHS says of its last run (for error messages)."""
    return lp.modelStatusToString(lp.getModelStatus())
