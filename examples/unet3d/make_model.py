#!/usr/bin/env python3
"""Writes unet3d.json: a small 3-D U-Net (Cicek et al., "3D U-Net: Learning Dense Volumetric
Segmentation from Sparse Annotation", MICCAI 2016) for tessera-cosmogen's segmentation data set:
1 x S^3 input, 3 classes per voxel (background, halo, void), softmax cross-entropy.

Each level: two (conv3d 3x3x3, padding 1 -> batchnorm -> relu); down by maxpool3d 2, up by
conv_transpose3d 2 (stride 2) and concat with the same level's features; channels double per level
from --filters. A 1x1x1 conv3d gives the 3 class scores. Plain Python: the JSON is the model.
    python3 make_model.py                     # writes unet3d.json next to this script
    python3 make_model.py --size 64 --levels 3 -o /tmp/unet64.json
"""
import argparse
import json
import os


def build(size, filters, levels, classes):
    layers = [{"name": "input", "type": "input", "shape": [1, size, size, size]}]

    def double_conv(prefix, x, f):
        for i in (1, 2):
            layers.extend([
                {"name": "%s_conv%d" % (prefix, i), "type": "conv3d", "input": x, "out_channels": f, "kernel": 3,
                 "padding": 1},
                {"name": "%s_bn%d" % (prefix, i), "type": "batchnorm"},
                {"name": "%s_relu%d" % (prefix, i), "type": "relu"},
            ])
            x = "%s_relu%d" % (prefix, i)
        return x

    x, skips = "input", []
    for lv in range(1, levels + 1):
        x = double_conv("enc%d" % lv, x, filters << (lv - 1))
        skips.append(x)
        layers.append({"name": "down%d" % lv, "type": "maxpool3d", "input": x, "kernel": 2})
        x = "down%d" % lv
    x = double_conv("bottom", x, filters << levels)
    for lv in range(levels, 0, -1):
        f = filters << (lv - 1)
        layers += [
            {"name": "up%d" % lv, "type": "conv_transpose3d", "input": x, "out_channels": f, "kernel": 2, "stride": 2},
            {"name": "up%d_cat" % lv, "type": "concat", "inputs": ["up%d" % lv, skips[lv - 1]]},
        ]
        x = double_conv("dec%d" % lv, "up%d_cat" % lv, f)
    layers.append({"name": "scores", "type": "conv3d", "input": x, "out_channels": classes, "kernel": 1})
    return {
        "name": "unet3d-%d" % size,
        "layers": layers,
        "output": "scores",
        "loss": {"type": "softmax_cross_entropy"},
        "optimizer": {"type": "adam", "lr": 0.002},
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=32, help="input side S, divisible by 2^levels (default 32)")
    ap.add_argument("--filters", type=int, default=8, help="channels of the first level (default 8)")
    ap.add_argument("--levels", type=int, default=2, help="poolings on the way down (default 2)")
    ap.add_argument("--classes", type=int, default=3, help="classes per voxel (default 3)")
    ap.add_argument("-o", "--out", default=os.path.join(here, "unet3d.json"), help="output file")
    a = ap.parse_args()
    if a.levels < 1 or a.size % (1 << a.levels):
        ap.error("--size must be divisible by 2^levels (levels >= 1)")
    with open(a.out, "w") as f:
        json.dump(build(a.size, a.filters, a.levels, a.classes), f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
