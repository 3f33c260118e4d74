#!/usr/bin/env python3
"""Scores CosmoFlow predictions against the validation targets: per parameter, the MSE of the
standardised targets, the RMSE in physical units (p = min + (t + 1) (max - min) / 2, with the
ranges stored in the data file), and R^2 = 1 - MSE / MSE of predicting the mean training target;
then the overall MSE against that baseline. Needs h5py and numpy.
    evaluate.py TRAIN.h5 VAL.h5 PRED.h5
"""
import sys

import h5py
import numpy as np


def text(v):
    """An HDF5 string attribute (fixed-length strings come back as bytes)."""
    return v.decode() if isinstance(v, bytes) else str(v)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    with h5py.File(sys.argv[1], "r") as f:
        mean = f["targets"][:].reshape(f["targets"].shape[0], -1).mean(axis=0)
    with h5py.File(sys.argv[2], "r") as f:
        t = f["targets"][:].reshape(f["targets"].shape[0], -1)
        names, units = text(f.attrs["param_names"]).split(","), text(f.attrs["param_units"]).split(",")
        lo, hi = np.asarray(f.attrs["param_min"]), np.asarray(f.attrs["param_max"])
    with h5py.File(sys.argv[3], "r") as f:
        p = f["predictions"][:].reshape(t.shape)
    half = (hi - lo) / 2
    mse = ((p - t) ** 2).mean(axis=0)
    base = ((t - mean) ** 2).mean(axis=0)
    print("%-8s %10s %10s %14s %8s" % ("param", "MSE", "mean MSE", "RMSE (units)", "R^2"))
    for i, n in enumerate(names):
        unit = "" if units[i] == "1" else " " + units[i]
        print("%-8s %10.5f %10.5f %10.4g%-4s %8.3f" % (n, mse[i], base[i], np.sqrt(mse[i]) * half[i], unit,
                                                       1 - mse[i] / base[i] if base[i] > 0 else float("nan")))
    total, total_base = mse.mean(), base.mean()
    print("validation MSE %.5f; predicting the mean training target %.5f: %.1f%% of it"
          % (total, total_base, 100 * total / total_base))


if __name__ == "__main__":
    main()
