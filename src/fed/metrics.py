"""Metrics as the papers define them (accuracies in percent, variances in percent squared)."""

from __future__ import annotations

import math

import numpy as np

# The per-round metrics a table may show (fed.evaluation computes them).
METRICS = ("global_acc", "class_acc_variance", "local_acc_mean", "client_acc_variance", "pooled_acc")
LOWER_IS_BETTER = frozenset({"class_acc_variance", "client_acc_variance"})  # fairness: variances
# Measured on the clients' local splits, which in a tuning run are validation splits carved from their training
# data (pooled_acc: all of them as one set, whose class mix is the training set's, the validation analogue of
# global_acc); global_acc and class_acc_variance read the external test set, so hyper-parameters are never chosen
# by them.
VALIDATION_METRICS = ("local_acc_mean", "client_acc_variance", "pooled_acc")


def per_class_accuracy(pred: np.ndarray, y: np.ndarray, num_classes: int) -> np.ndarray:
    """Accuracy (%) per class; NaN for a class absent from ``y``."""
    correct = np.bincount(y[pred == y], minlength=num_classes)
    total = np.bincount(y, minlength=num_classes)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, 100.0 * correct / np.maximum(total, 1), np.nan)


def group_accuracy(pred: np.ndarray, y: np.ndarray, groups: np.ndarray, num_groups: int) -> np.ndarray:
    """Accuracy (%) of each group (e.g. each client's local test set); NaN for an empty group."""
    correct = np.bincount(groups[pred == y], minlength=num_groups)
    total = np.bincount(groups, minlength=num_groups)
    return np.where(total > 0, 100.0 * correct / np.maximum(total, 1), np.nan)


def variance(values: np.ndarray) -> float:
    """Population variance across classes or clients (Fed-ZDA's fairness metrics), NaNs (empty groups) dropped."""
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    return float(np.var(values)) if len(values) else math.nan


def mean_std(values: list[float]) -> tuple[float, float, int]:
    """Mean and sample std (ddof=1) over seeds; std is NaN for one seed. Non-finite values must be filtered first."""
    arr = np.asarray(values, dtype=float)
    if len(arr) == 0:
        return math.nan, math.nan, 0
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else math.nan, len(arr)
