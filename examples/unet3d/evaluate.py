#!/usr/bin/env python3
"""Scores 3-D U-Net predictions (class scores per voxel) against the validation labels: the mean
softmax cross-entropy per voxel against that of predicting the training data's class frequencies
everywhere (the mean target), voxel accuracy against always predicting the most frequent class,
and the intersection over union of each class. Needs h5py and numpy.
    evaluate.py TRAIN.h5 VAL.h5 PRED.h5
"""
import sys

import h5py
import numpy as np


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    with h5py.File(sys.argv[1], "r") as f:
        y = f["targets"]
        k = y.shape[1]
        freq = sum(y[i].reshape(k, -1).sum(axis=1) for i in range(y.shape[0]))
    freq = freq / freq.sum()
    names = ["background", "halo", "void"][:k] + ["class%d" % c for c in range(3, k)]
    ce = ce_base = acc = acc_base = voxels = 0.0
    inter, union = np.zeros(k), np.zeros(k)
    with h5py.File(sys.argv[2], "r") as fv, h5py.File(sys.argv[3], "r") as fp:
        for i in range(fv["targets"].shape[0]):
            t = fv["targets"][i].reshape(k, -1)
            z = fp["predictions"][i].reshape(k, -1).astype(np.float64)
            z -= z.max(axis=0)
            logp = z - np.log(np.exp(z).sum(axis=0))
            ce += -(t * logp).sum()
            ce_base += -(t * np.log(freq)[:, None]).sum()
            label, guess = t.argmax(axis=0), z.argmax(axis=0)
            acc += (label == guess).sum()
            acc_base += (label == freq.argmax()).sum()
            voxels += label.size
            for c in range(k):
                inter[c] += ((label == c) & (guess == c)).sum()
                union[c] += ((label == c) | (guess == c)).sum()
    print("class frequencies (training): " + ", ".join("%s %.3f" % (n, f) for n, f in zip(names, freq)))
    print("IoU: " + ", ".join("%s %.3f" % (n, inter[c] / union[c] if union[c] else float("nan"))
                              for c, n in enumerate(names)))
    print("voxel accuracy %.4f; always '%s' %.4f" % (acc / voxels, names[freq.argmax()], acc_base / voxels))
    print("validation cross-entropy %.5f; predicting the class frequencies %.5f: %.1f%% of it"
          % (ce / voxels, ce_base / voxels, 100 * ce / ce_base))


if __name__ == "__main__":
    main()
