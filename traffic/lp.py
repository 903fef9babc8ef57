"""Linear programmes on HiGHS (highspy), the one module that imports it: a model that prints
nothing, rows and columns added from scipy sparse matrices, and its outcome.

HiGHS prints its banner on stdout when a process makes its first model, whatever the
model's options say, which would break the commands' ``--json`` output; ``model`` makes
that first one with stdout pointed at /dev/null.

>>> lp = model()
>>> add_columns(lp, [-1.0, -2.0], [0.0, 0.0], [INF, INF])
>>> add_rows(lp, [-INF], [2.0], [[1.0, 1.0]])
>>> solved(lp), lp.getSolution().col_value
(True, [0.0, 2.0])
"""

from __future__ import annotations

import os
import sys

import highspy
import numpy as np
from scipy.sparse import csc_matrix, csr_matrix

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


def add_rows(lp: highspy.Highs, lower, upper, matrix=None) -> None:
    """Rows ``lower <= matrix @ x <= upper`` over the model's columns (``matrix``: one row per
    bound, dense or sparse; None: rows with no entries yet)."""
    lower, upper = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
    a = csr_matrix((len(lower), lp.getNumCol())) if matrix is None else csr_matrix(matrix)
    lp.addRows(len(lower), lower, upper, a.nnz, a.indptr[:-1].astype(np.int32),
               a.indices.astype(np.int32), a.data)


def add_columns(lp: highspy.Highs, cost, lower, upper, matrix=None) -> None:
    """Columns with these costs and bounds, their entries in the model's rows given by
    ``matrix`` (one column each, dense or sparse; None: no entries yet)."""
    cost = np.asarray(cost, dtype=float)
    a = csc_matrix((lp.getNumRow(), len(cost))) if matrix is None else csc_matrix(matrix)
    lp.addCols(len(cost), cost, np.asarray(lower, dtype=float), np.asarray(upper, dtype=float),
               a.nnz, a.indptr[:-1].astype(np.int32), a.indices.astype(np.int32), a.data)


def solve(lp: highspy.Highs, what: str) -> None:
    """Run ``lp``; a RuntimeError naming ``what`` unless HiGHS found an optimum."""
    if not solved(lp):
        raise RuntimeError(f"the {what} failed: HiGHS says {outcome(lp)}")


def solved(lp: highspy.Highs) -> bool:
    """Run ``lp``: whether HiGHS found an optimum."""
    return (lp.run() == highspy.HighsStatus.kOk
            and lp.getModelStatus() == highspy.HighsModelStatus.kOptimal)


def outcome(lp: highspy.Highs) -> str:
    """What HiGHS says of its last run (for error messages)."""
    return lp.modelStatusToString(lp.getModelStatus())
