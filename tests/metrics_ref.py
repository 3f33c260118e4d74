"""numpy reference for tests/check_metrics.c: fixed image pairs and their PSNR and SSIM.

Writes into the folder given: truth.npy and pred.npy ([N, 1, 24, 20] float32, non-square so that a
transposed window or stride shows) and ref.txt (one line per pair: PSNR in dB, SSIM). The data range
of each pair is its true image's max - min. SSIM as Wang et al. 2004 (their ssim_index.m): an
11 x 11 Gaussian window of sigma 1.5 normalised to sum 1, applied as a full 2-D window (not the two
1-D passes of src/metrics/image.c) at every position where it fits, K1 = 0.01, K2 = 0.03,
variances and covariance without sample correction; the mean of the map. float64 throughout.
"""
import sys

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def window():
    g = np.exp(-((np.arange(11) - 5.0) ** 2) / (2 * 1.5**2))
    w = np.outer(g, g)
    return w / w.sum()


def ssim(x, y, L):
    w = window()

    def local(a):
        return np.einsum("ijkl,kl->ij", sliding_window_view(a, (11, 11)), w)

    mx, my = local(x), local(y)
    vx, vy, cxy = local(x * x) - mx * mx, local(y * y) - my * my, local(x * y) - mx * my
    c1, c2 = (0.01 * L) ** 2, (0.03 * L) ** 2
    return np.mean((2 * mx * my + c1) * (2 * cxy + c2) / ((mx * mx + my * my + c1) * (vx + vy + c2)))


def psnr(x, y, L):
    return 10 * np.log10(L * L / np.mean((y - x) ** 2))


def images():
    rng = np.random.default_rng(5)
    yy, xx = np.mgrid[0:24, 0:20]
    truth = np.zeros((24, 20))
    for _ in range(6):  # Gaussian "atoms" on a small background noise
        cy, cx, s, a = rng.uniform(2, 22), rng.uniform(2, 18), rng.uniform(1, 2.5), rng.uniform(0.5, 2)
        truth += a * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
    truth += 0.02 * rng.standard_normal(truth.shape)
    preds = [
        truth + 0.05 * rng.standard_normal(truth.shape),  # noise
        0.8 * truth + 0.3,                                # contrast and brightness
        np.roll(truth, 1, axis=1),                        # shifted by a pixel along the width
        rng.uniform(0, 1, truth.shape),                   # unrelated
    ]
    t = np.stack([truth] * len(preds)).astype(np.float32)[:, None]
    p = np.stack(preds).astype(np.float32)[:, None]
    return t, p


def main(folder):
    t, p = images()
    np.save(f"{folder}/truth.npy", t)
    np.save(f"{folder}/pred.npy", p)
    with open(f"{folder}/ref.txt", "w") as f:
        for x, y in zip(t[:, 0].astype(np.float64), p[:, 0].astype(np.float64)):
            L = x.max() - x.min()
            f.write(f"{psnr(x, y, L):.17g} {ssim(x, y, L):.17g}\n")


if __name__ == "__main__":
    main(sys.argv[1])
