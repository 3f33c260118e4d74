#!/usr/bin/env python3
"""Writes fcdensenet.json: an FCDenseNet ("One Hundred Layers Tiramisu", Jegou et al. 2017) for the
STEMDL-style inverse problem, 1x64x64 diffraction pattern -> 1x64x64 projected potential.

Plain Python (no torch): the JSON is the model; this script only saves typing its ~80 layers.
    python3 make_model.py                      # writes fcdensenet.json next to this script
    python3 make_model.py --growth 16 --layers 4,4,4,4 -o bigger.json
    python3 make_model.py --size 32 --in-channels 16 --bottleneck dense:256 -o fcdensenet_cbed_dense256.json
    python3 make_model.py --size 32 --in-channels 16 --input-mix dense:256 -o inmix256.json
The last two add a global mixing path (README, held-out section): at the lowest resolution, or
from the input itself.
"""
import argparse
import json
import os
import sys


class Builder:
    """Accumulates layers and tracks each layer's per-sample shape [C, H, W] (for channel counts and FLOPs)."""

    def __init__(self):
        self.layers = []
        self.shape = {}
        self.macs = 0

    def add(self, name, kind, inputs, **fields):
        assert name not in self.shape, name
        layer = {"name": name, "type": kind}
        if isinstance(inputs, str):
            layer["input"] = inputs
        elif inputs:
            layer["inputs"] = list(inputs)
        layer.update(fields)
        self.layers.append(layer)
        src = [inputs] if isinstance(inputs, str) else list(inputs or [])
        c, h, w = self.shape[src[0]] if src else fields["shape"]
        k = fields.get("kernel", 1)
        if kind == "conv2d":
            p = fields.get("padding", 0)
            h, w = h + 2 * p - k + 1, w + 2 * p - k + 1
            self.macs += fields["out_channels"] * h * w * c * k * k
            c = fields["out_channels"]
        elif kind == "conv_transpose2d":
            s = fields.get("stride", 1)
            self.macs += c * h * w * fields["out_channels"] * k * k
            h, w = (h - 1) * s + k, (w - 1) * s + k
            c = fields["out_channels"]
        elif kind == "maxpool2d":
            h, w = h // k, w // k
        elif kind == "flatten":
            c, h, w = c * h * w, 1, 1
        elif kind == "dense":
            assert (h, w) == (1, 1), "dense needs a flatten before it"
            self.macs += c * fields["out_features"]
            c = fields["out_features"]
        elif kind == "concat":
            assert len(src) <= 32, "concat takes at most 32 inputs"
            assert all(self.shape[s][1:] == (h, w) for s in src), src
            c = sum(self.shape[s][0] for s in src)
        self.shape[name] = (c, h, w)
        return name

    def bn_relu_conv(self, prefix, x, out_channels, kernel):
        """DenseNet's pre-activation unit: batchnorm -> relu -> conv ('same' padding)."""
        x = self.add(prefix + "_bn", "batchnorm", x)
        x = self.add(prefix + "_relu", "relu", x)
        pad = {"padding": kernel // 2} if kernel > 1 else {}
        return self.add(prefix + "_conv", "conv2d", x, out_channels=out_channels, kernel=kernel, **pad)

    def dense_block(self, name, x, nlayers, growth, want_new):
        """Each layer's new k feature maps are concatenated with everything before it. Returns
        (block input + all new maps, None), or with want_new (None, the new maps only): the down path
        and the last up block pass everything on, the bottleneck and the other up blocks only the new
        maps to the next transition up (so the channel count does not explode), as in the paper."""
        new = []
        for i in range(1, nlayers + 1):
            p = "%s_l%d" % (name, i)
            y = self.bn_relu_conv(p, x, growth, 3)
            new.append(y)
            if i < nlayers or not want_new:  # no dead layers: the last concat feeds nothing then
                x = self.add(p + "_cat", "concat", [x, y])
        if not want_new:
            return x, None
        return None, self.add(name + "_new", "concat", new) if len(new) > 1 else new[0]


def global_mix(b, p, x, width, channels, relu_first=True):
    """A global path: every output pixel depends on every pixel of x (a diffraction pattern relates to
    the whole illuminated area, not pixel by pixel). batchnorm [-> relu] -> flatten -> dense `width`
    -> relu -> a transposed conv whose kernel is x's side, from [width, 1, 1] back to
    [channels, h, w] (the model format has no reshape; a transposed conv of a 1x1 map with an h x w
    kernel is one). Layer names start with p."""
    _, h, w = b.shape[x]
    assert h == w, "square maps only"
    y = b.add(p + "_bn", "batchnorm", x)
    if relu_first:
        y = b.add(p + "_relu", "relu", y)
    y = b.add(p + "_flat", "flatten", y)
    y = b.add(p + "_dense", "dense", y, out_features=width)
    y = b.add(p + "_dense_relu", "relu", y)
    return b.add(p + "_up", "conv_transpose2d", y, out_channels=channels, kernel=h)


def build(args):
    b = Builder()
    x = b.add("input", "input", None, shape=[args.in_channels, args.size, args.size])
    stem = b.add("conv0", "conv2d", x, out_channels=args.stem, kernel=3, padding=1)
    if args.input_mix:  # the input normalised per channel, no relu (it would drop half of the pattern)
        stem = b.add("imix_cat", "concat", [stem, global_mix(b, "imix", x, args.input_mix, args.stem, False)])
    x = stem
    levels = len(args.layers) - 1          # the last entry is the bottleneck
    skips = []
    for lv in range(1, levels + 1):
        full, _ = b.dense_block("db%d" % lv, x, args.layers[lv - 1], args.growth, False)
        skips.append(full)
        td = "td%d" % lv
        y = b.bn_relu_conv(td, full, b.shape[full][0], 1)
        x = b.add(td + "_pool", "maxpool2d", y, kernel=2)
    _, new = b.dense_block("db%d" % (levels + 1), x, args.layers[-1], args.growth, True)
    if args.bottleneck:
        new = b.add("gmix_cat", "concat", [new, global_mix(b, "gmix", x, args.bottleneck, args.mix_channels)])
    for i, lv in enumerate(range(levels, 0, -1)):
        nb = levels + 2 + i                  # up-path blocks continue the numbering
        up = b.add("tu%d" % lv, "conv_transpose2d", new, out_channels=b.shape[new][0], kernel=2, stride=2)
        x = b.add("tu%d_cat" % lv, "concat", [up, skips[lv - 1]])
        full, new = b.dense_block("db%d" % nb, x, args.layers[lv - 1], args.growth, lv > 1)
    b.add("final", "conv2d", full, out_channels=1, kernel=1)
    model = {
        "name": "stemdl-fcdensenet" + ("-cbed%d" % args.in_channels if args.in_channels > 1 else "")
                + ("-dense%d" % args.bottleneck if args.bottleneck else "")
                + ("-inmix%d" % args.input_mix if args.input_mix else ""),
        "layers": b.layers,
        "output": "final",
        "loss": {"type": "mse"},
        "optimizer": {"type": "adamw", "lr": 1e-3, "weight_decay": 1e-4},
    }
    return model, b


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", default=os.path.join(here, "fcdensenet.json"), help="output file")
    ap.add_argument("--size", type=int, default=64, help="input/output side in pixels (default 64)")
    ap.add_argument("--in-channels", type=int, default=1,
                    help="input channels, e.g. 16 for a 4x4 grid of CBED patterns (default 1)")
    ap.add_argument("--stem", type=int, default=16, help="channels of the first conv (default 16)")
    ap.add_argument("--growth", type=int, default=8, help="growth rate k (default 8)")
    ap.add_argument("--layers", default="2,2,2,2",
                    help="layers per dense block on the way down, then the bottleneck's (default 2,2,2,2)")
    ap.add_argument("--bottleneck", default="",
                    help="dense:N adds a global path at the lowest resolution (flatten -> dense N -> relu -> "
                         "transposed conv back to the map), concatenated to the bottleneck's new maps")
    ap.add_argument("--mix-channels", type=int, default=0,
                    help="channels the global path gives back (default: the bottleneck block's, growth x layers)")
    ap.add_argument("--input-mix", default="",
                    help="dense:N adds a global path at the input (flatten -> dense N -> relu -> transposed "
                         "conv back to --stem maps of full size), concatenated to the first conv's maps")
    args = ap.parse_args()
    for opt in ("bottleneck", "input_mix"):
        v = getattr(args, opt)
        if v:
            kind, _, n = v.partition(":")
            if kind != "dense" or not n.isdigit() or int(n) < 1:
                ap.error("--%s takes dense:N with N >= 1, not %r" % (opt.replace("_", "-"), v))
            setattr(args, opt, int(n))
    args.layers = [int(v) for v in args.layers.split(",")]
    if len(args.layers) < 2 or min(args.layers) < 1:
        ap.error("--layers needs at least one level and the bottleneck, all >= 1")
    if args.size % (1 << (len(args.layers) - 1)):
        ap.error("--size must be divisible by 2^levels")
    if args.mix_channels < 0:
        ap.error("--mix-channels must be >= 0")
    args.mix_channels = args.mix_channels or args.growth * args.layers[-1]
    model, b = build(args)
    with open(args.out, "w") as f:
        json.dump(model, f, indent=1)
        f.write("\n")
    nconv = sum(l["type"] in ("conv2d", "conv_transpose2d") for l in model["layers"])
    print("%s: %d layers, %d convolutions, %.3f GFLOP per sample forward (2 x MACs)"
          % (args.out, len(model["layers"]), nconv, 2e-9 * b.macs), file=sys.stderr)


if __name__ == "__main__":
    main()
