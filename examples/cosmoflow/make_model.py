#!/usr/bin/env python3
"""Writes cosmoflow.json (4x32^3 input) or, with --size 64, cosmoflow64.json: a CosmoFlow-style 3-D
CNN (Mathuriya et al., "CosmoFlow: Using Deep Learning to Learn the Universe at Scale", SC18; the
MLPerf HPC reference) scaled down so it trains on a few CPU cores. Regression of the 4 standardised
parameters of tessera-cosmogen's data set.

Blocks conv3d 3x3x3 (padding 1) -> batchnorm -> leaky_relu (0.3) -> maxpool3d 2 until the map is 2^3,
the channels doubling from --filters up to --max-filters; then flatten -> dense 64 -> leaky_relu ->
dense 32 -> leaky_relu -> dense 4 -> tanh with scale 1.2 (y = 1.2 tanh(x): targets lie in [-1, 1]).
Plain Python: the JSON is the model; this script only saves typing it.
    python3 make_model.py                    # writes cosmoflow.json next to this script
    python3 make_model.py --size 64          # writes cosmoflow64.json
"""
import argparse
import json
import os


def build(size, channels, filters, max_filters, outputs):
    layers = [{"name": "input", "type": "input", "shape": [channels, size, size, size]}]
    block, side, f = 0, size, filters
    while side > 2:
        block += 1
        layers += [
            {"name": "conv%d" % block, "type": "conv3d", "out_channels": f, "kernel": 3, "padding": 1},
            {"name": "bn%d" % block, "type": "batchnorm"},
            {"name": "act%d" % block, "type": "leaky_relu", "alpha": 0.3},
            {"name": "pool%d" % block, "type": "maxpool3d", "kernel": 2},
        ]
        side //= 2
        f = min(2 * f, max_filters)
    layers.append({"name": "flatten", "type": "flatten"})
    for i, width in enumerate((64, 32), 1):
        layers += [{"name": "fc%d" % i, "type": "dense", "out_features": width},
                   {"name": "fc%d_act" % i, "type": "leaky_relu", "alpha": 0.3}]
    layers += [{"name": "fc3", "type": "dense", "out_features": outputs},
               {"name": "output", "type": "tanh", "scale": 1.2}]
    return {
        "name": "cosmoflow-%d" % size,
        "layers": layers,
        "output": "output",
        "loss": {"type": "mse"},
        "optimizer": {"type": "adam", "lr": 0.002},
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=32, help="input side S, a power of 2 >= 4 (default 32)")
    ap.add_argument("--channels", type=int, default=4, help="input channels: redshifts (default 4)")
    ap.add_argument("--filters", type=int, default=8, help="channels of the first conv3d (default 8)")
    ap.add_argument("--max-filters", type=int, default=64, help="at most this many channels (default 64)")
    ap.add_argument("--outputs", type=int, default=4, help="regression targets (default 4)")
    ap.add_argument("-o", "--out", help="output file (default cosmoflow.json, or cosmoflowS.json for S != 32)")
    a = ap.parse_args()
    if a.size < 4 or a.size & (a.size - 1):
        ap.error("--size must be a power of 2, at least 4")
    out = a.out or os.path.join(here, "cosmoflow.json" if a.size == 32 else "cosmoflow%d.json" % a.size)
    with open(out, "w") as f:
        json.dump(build(a.size, a.channels, a.filters, a.max_filters, a.outputs), f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
