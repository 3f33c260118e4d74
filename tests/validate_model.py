#!/usr/bin/env python3
"""Checks a Tessera model file without the library: JSON syntax, top-level fields, every layer's
type and fields (docs/model-format.md, plus the 3-D kinds "conv3d", "conv_transpose3d", "maxpool3d",
"avgpool3d" and tanh's "scale", as issue 15 names them), its inputs, and per-sample shapes [C, H, W]
or [C, D, H, W] through the whole network, against the data's shapes when given. For model files
written before the library knows a layer kind (3-D examples): the library checks them again when it
loads them. Prints one line with the layer count, parameters and forward MACs; exits 1 naming the
layer and field at the first problem.

    validate_model.py MODEL.json [--input 4,32,32,32] [--output 4,1,1]
"""
import argparse
import json
import math
import sys

SPATIAL = {"kernel", "stride", "padding", "dilation", "output_padding"}
CONV = {"out_channels", "kernel", "stride", "padding", "dilation", "bias"}
POOL = {"kernel", "stride", "padding"}
FIELDS = {
    "input": {"shape"},
    "conv2d": CONV, "conv3d": CONV,
    "conv_transpose2d": CONV | {"output_padding"}, "conv_transpose3d": CONV | {"output_padding"},
    "maxpool2d": POOL, "avgpool2d": POOL, "maxpool3d": POOL, "avgpool3d": POOL,
    "relu": set(), "sigmoid": set(), "gelu": set(), "tanh": {"scale"},
    "leaky_relu": {"alpha"}, "batchnorm": {"eps", "momentum"},
    "dropout": {"p"}, "spatial_dropout": {"p"},
    "concat": set(), "add": set(), "flatten": set(), "dense": {"out_features", "bias"},
}
REQUIRED = {"input": {"shape"}, "dense": {"out_features"}, "flatten": set()}
for k in ("conv2d", "conv3d", "conv_transpose2d", "conv_transpose3d"):
    REQUIRED[k] = {"out_channels", "kernel"}
for k in ("maxpool2d", "avgpool2d", "maxpool3d", "avgpool3d"):
    REQUIRED[k] = {"kernel"}
LOSSES = {"mse", "l1", "huber", "softmax_cross_entropy"}
OPTIMIZERS = {"sgd", "adam", "adamw", "lion", "lamb"}


class Bad(Exception):
    pass


def spatial(layer, key, n, default):
    """A spatial field: one positive/non-negative integer for every axis, or a list of n."""
    v = layer.get(key, default)
    v = [v] * n if isinstance(v, int) and not isinstance(v, bool) else v
    if not isinstance(v, list) or len(v) != n or not all(isinstance(a, int) and not isinstance(a, bool) for a in v):
        raise Bad("layer '%s': field '%s' must be an integer or a list of %d integers" % (layer["name"], key, n))
    return v


def infer(layer, kind, ins):
    """Output shape of one layer from its input shapes; (shape, parameters, MACs)."""
    name = layer["name"]
    if kind == "input":
        s = layer["shape"]
        if not isinstance(s, list) or len(s) not in (3, 4) or not all(isinstance(a, int) and a > 0 for a in s):
            raise Bad("layer '%s': shape must be [C, H, W] or [C, D, H, W] of positive integers" % name)
        return list(s), 0, 0
    x = ins[0]
    c, sp = x[0], x[1:]
    is3 = kind.endswith("3d")
    if kind[:-2] in ("conv", "conv_transpose", "maxpool", "avgpool"):
        if (len(sp) == 3) != is3:
            raise Bad("layer '%s': %s needs a %s input, got %s" % (name, kind, "[C, D, H, W]" if is3 else "[C, H, W]", x))
        n = len(sp)
        k = spatial(layer, "kernel", n, 1)
        pool = "pool" in kind
        s = spatial(layer, "stride", n, k if pool else 1)
        p = spatial(layer, "padding", n, 0)
        d = spatial(layer, "dilation", n, 1)
        op = spatial(layer, "output_padding", n, 0)
        if min(k + s + d) < 1 or min(p + op) < 0:
            raise Bad("layer '%s': kernel, stride, dilation must be positive, padding non-negative" % name)
        if kind.startswith("conv_transpose"):
            out = [(a - 1) * si - 2 * pi + di * (ki - 1) + oi + 1 for a, ki, si, pi, di, oi in zip(sp, k, s, p, d, op)]
        else:
            out = [(a + 2 * pi - di * (ki - 1) - 1) // si + 1 for a, ki, si, pi, di in zip(sp, k, s, p, d)]
        if min(out) < 1:
            raise Bad("layer '%s': kernel %s does not fit input %s" % (name, k, x))
        if pool:
            return [c] + out, 0, 0
        oc = layer["out_channels"]
        kv = math.prod(k)
        bias = oc if layer.get("bias", True) else 0
        macs = oc * c * kv * math.prod(sp if kind.startswith("conv_transpose") else out)
        return [oc] + out, oc * c * kv + bias, macs
    if kind in ("concat", "add"):
        if len(ins) < 2:
            raise Bad("layer '%s': %s takes two or more inputs" % (name, kind))
        if any(len(i) != len(x) or i[1:] != sp for i in ins):
            raise Bad("layer '%s': inputs of different %s: %s" % (name, "spatial shapes" if kind == "concat" else "shapes", ins))
        if kind == "add" and any(i[0] != c for i in ins):
            raise Bad("layer '%s': add of different channel counts: %s" % (name, ins))
        return ([sum(i[0] for i in ins)] if kind == "concat" else [c]) + sp, 0, 0
    if kind == "flatten":
        return [math.prod(x), 1, 1], 0, 0
    if kind == "dense":
        if sp != [1, 1]:
            raise Bad("layer '%s': dense needs an input [N, 1, 1] (flatten first), got %s" % (name, x))
        of = layer["out_features"]
        return [of, 1, 1], of * c + (of if layer.get("bias", True) else 0), of * c
    if kind == "batchnorm":
        return list(x), 2 * c, 0
    return list(x), 0, 0


def check(model, want_in, want_out):
    if not isinstance(model, dict):
        raise Bad("the file is not a JSON object")
    extra = set(model) - {"name", "layers", "output", "loss", "optimizer"}
    if extra:
        raise Bad("unknown top-level field(s): %s" % ", ".join(sorted(extra)))
    layers = model.get("layers")
    if not isinstance(layers, list) or not layers:
        raise Bad("'layers' must be a non-empty array")
    shapes, params, macs, prev = {}, 0, 0, None
    for i, layer in enumerate(layers):
        if not isinstance(layer, dict) or not isinstance(layer.get("name"), str) or not isinstance(layer.get("type"), str):
            raise Bad("layer %d: needs a string 'name' and 'type'" % i)
        name, kind = layer["name"], layer["type"]
        if name in shapes:
            raise Bad("layer '%s': the name is used twice" % name)
        if kind not in FIELDS:
            raise Bad("layer '%s': unknown type '%s'" % (name, kind))
        bad = set(layer) - FIELDS[kind] - {"name", "type", "input", "inputs"}
        if bad:
            raise Bad("layer '%s': type '%s' takes no field(s) %s (valid: %s)"
                      % (name, kind, ", ".join(sorted(bad)), ", ".join(sorted(FIELDS[kind])) or "none"))
        missing = REQUIRED.get(kind, set()) - set(layer)
        if missing:
            raise Bad("layer '%s': missing field(s) %s" % (name, ", ".join(sorted(missing))))
        if "input" in layer and "inputs" in layer:
            raise Bad("layer '%s': both 'input' and 'inputs'" % name)
        src = layer.get("inputs", [layer["input"]] if "input" in layer else ([] if kind == "input" else [prev]))
        for s in src:
            if s not in shapes:
                raise Bad("layer '%s': input '%s' is not a layer defined before it" % (name, s))
        if kind == "tanh" and "scale" in layer and not (isinstance(layer["scale"], (int, float)) and layer["scale"] > 0):
            raise Bad("layer '%s': scale must be a positive number" % name)
        out, p, m = infer(layer, kind, [shapes[s] for s in src])
        shapes[name], prev = out, name
        params += p
        macs += m
    inputs = [l["name"] for l in layers if l["type"] == "input"]
    output = model.get("output", prev)
    if output not in shapes:
        raise Bad("output '%s' is not a layer" % output)
    if want_in and shapes[inputs[0]] != want_in:
        raise Bad("input '%s' has shape %s, the data %s" % (inputs[0], shapes[inputs[0]], want_in))
    if want_out and shapes[output] != want_out:
        raise Bad("output '%s' has shape %s, the targets %s" % (output, shapes[output], want_out))
    loss = model.get("loss", {"type": "mse"})
    if loss.get("type") not in LOSSES:
        raise Bad("unknown loss type '%s'" % loss.get("type"))
    if loss["type"] == "softmax_cross_entropy" and shapes[output][0] < 2:
        raise Bad("softmax_cross_entropy needs at least 2 output channels, '%s' has %d" % (output, shapes[output][0]))
    opt = model.get("optimizer", {"type": "adam"})
    if opt.get("type") not in OPTIMIZERS:
        raise Bad("unknown optimizer type '%s'" % opt.get("type"))
    return len(layers), params, macs, shapes[output]


def no_repeats(pairs):
    keys = [k for k, _ in pairs]
    for k in keys:
        if keys.count(k) > 1:
            raise Bad("key '%s' repeated in one object" % k)
    return dict(pairs)


def dims(text):
    return [int(v) for v in text.split(",")] if text else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--input", help="the data's per-sample input shape, e.g. 4,32,32,32")
    ap.add_argument("--output", help="the targets' per-sample shape, e.g. 4,1,1")
    a = ap.parse_args()
    try:
        with open(a.model) as f:
            model = json.load(f, object_pairs_hook=no_repeats)
        n, params, macs, out = check(model, dims(a.input), dims(a.output))
    except (OSError, ValueError, Bad) as e:
        print("%s: %s" % (a.model, e), file=sys.stderr)
        return 1
    print("%s: %d layers, %d parameters, %.3f GFLOP per sample forward (2 x MACs), output %s"
          % (a.model, n, params, 2e-9 * macs, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
