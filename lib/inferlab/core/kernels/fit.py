"""Least squares in log space (Levenberg-Marquardt, numpy only) for the kernel models.

Minimises sum (log predicted - log measured)^2, so every row counts by its relative error: a 5 us
decode kernel weighs as much as a 5 ms prefill one. Parameters are fitted as logarithms, which keeps
them positive.
"""
from __future__ import annotations

import numpy as np


def fit_log(predict, log_theta0, measured, *, max_iter: int = 300) -> np.ndarray:
    """log-parameters minimising the squared log error of predict(exp(log_theta)) against measured."""
    theta = np.asarray(log_theta0, dtype=float).copy()
    log_meas = np.log(measured)

    def residual(th):
        return np.log(predict(np.exp(th))) - log_meas

    r = residual(theta)
    cost = float(r @ r)
    damping = 1e-2
    for _ in range(max_iter):
        jac = np.empty((r.size, theta.size))
        for j in range(theta.size):
            step = theta.copy()
            step[j] += 1e-6
            jac[:, j] = (residual(step) - r) / 1e-6
        a, g = jac.T @ jac, jac.T @ r
        delta = np.linalg.solve(a + damping * np.diag(np.diag(a) + 1e-12), -g)
        r_new = residual(theta + delta)
        cost_new = float(r_new @ r_new)
        if cost_new < cost:
            converged = cost - cost_new < 1e-12 * cost
            theta, r, cost = theta + delta, r_new, cost_new
            damping /= 3
            if converged:
                break
        else:
            damping *= 4
            if damping > 1e12:
                break
    return theta


def fit_affine_relative(x, measured) -> tuple[float, float]:
    """(a, b) of t = a + b x minimising the squared relative error sum ((a + b x) / t - 1)^2,
    both clipped at 0 (a kernel never takes negative time)."""
    x, t = np.asarray(x, dtype=float), np.asarray(measured, dtype=float)
    design = np.column_stack([np.ones_like(x), x]) / t[:, None]
    a, b = np.linalg.lstsq(design, np.ones_like(t), rcond=None)[0]
    if a < 0 or b < 0:  # refit with the offending term dropped
        if b < 0:
            return float(np.median(t)), 0.0
        return 0.0, float(np.median(t / x))
    return float(a), float(b)


def relative_errors(predicted, measured) -> np.ndarray:
    """predicted / measured - 1, elementwise."""
    return np.asarray(predicted, dtype=float) / np.asarray(measured, dtype=float) - 1.0
