#!/usr/bin/python3
"""PyTorch twin of a Tessera model file: interprets the "layers" list of any model file (the format of
docs/model-format.md) into a torch.nn.Module whose submodules are named after the layers, so its
state_dict names ("<layer>.weight", "<layer>.running_mean", ...) are Tessera's parameter names, and
loads parameters Tessera exported, with the input normalisation they carry, so the net takes the
same raw inputs as the trainer did. Used by bench_train.py and by tests comparing outputs; runs
with Debian's torch 1.13.

    import torch_model
    net, spec = torch_model.load("examples/stemdl/fcdensenet.json")
    loss_fn = torch_model.make_loss(spec); opt = torch_model.make_optimizer(spec, net.parameters())
    torch_model.load_params(net, "params.h5")   # tessera-train --export-params params.h5

    /usr/bin/python3 bench/torch_model.py MODEL.json   # prints the layers, shapes and FLOPs
"""
import glob
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

KINDS = ("input", "conv2d", "conv_transpose2d", "maxpool2d", "avgpool2d", "relu", "leaky_relu", "tanh",
         "sigmoid", "batchnorm", "dropout", "spatial_dropout", "concat", "add", "dense", "flatten")


def _pair(layer, key, default):
    v = layer.get(key, default)
    if v is None:
        raise ValueError("layer '%s': %s is required" % (layer["name"], key))
    if isinstance(v, (list, tuple)):
        if len(v) != 2:
            raise ValueError("layer '%s': %s must be an int or [h, w]" % (layer["name"], key))
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _out_size(n, k, s, p, d=1):
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


class _Dense(nn.Linear):
    """Dense on [N, F, 1, 1] (Tessera's per-sample shape [F, 1, 1]); keeps the 4-D layout."""

    def forward(self, x):
        return super().forward(x.flatten(1))[:, :, None, None]


class _Flatten(nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0], -1, 1, 1)


class Net(nn.Module):
    """Runs the layers in file order; each layer's output is kept until the last layer reading it."""

    def __init__(self, spec):
        super().__init__()
        self.name = spec.get("name", "model")
        self.plan = []       # (name, type, [input names])
        self.shapes = {}     # name -> (C, H, W)
        self.macs = {}       # name -> forward multiply-adds per sample
        prev = None
        for layer in spec["layers"]:
            name, kind = layer["name"], layer["type"]
            if kind not in KINDS:
                raise ValueError("layer '%s': unknown type '%s'" % (name, kind))
            if name in self.shapes:
                raise ValueError("layer '%s': duplicate name" % name)
            if kind == "input":
                ins = []
            elif "inputs" in layer:
                ins = list(layer["inputs"])
            elif "input" in layer:
                ins = [layer["input"]]
            elif prev is not None:
                ins = [prev]
            else:
                raise ValueError("layer '%s' has no input" % name)
            for i in ins:
                if i not in self.shapes:
                    raise ValueError("layer '%s': unknown input '%s'" % (name, i))
            mod, shape = self._build(layer, kind, [self.shapes[i] for i in ins])
            if mod is not None:
                self.add_module(name, mod)
            self.shapes[name] = shape
            self.plan.append((name, kind, ins))
            prev = name
        self.inputs = [n for n, k, _ in self.plan if k == "input"]
        if len(self.inputs) != 1:
            raise ValueError("the model needs exactly one input layer, has %d" % len(self.inputs))
        self.output = spec.get("output", prev)
        if self.output not in self.shapes:
            raise ValueError("output '%s' is not a layer" % self.output)
        # free each intermediate after its last reader
        last = {}
        for idx, (_, _, ins) in enumerate(self.plan):
            for i in ins:
                last[i] = idx
        self.release = [[i for i in set(ins) if last[i] == idx and i != self.output]
                        for idx, (_, _, ins) in enumerate(self.plan)]
        # Tessera's input normalisation (load_params): not part of the state_dict
        self.register_buffer("input_mean", None, persistent=False)
        self.register_buffer("input_std", None, persistent=False)

    def _build(self, layer, kind, in_shapes):
        name = layer["name"]
        self.macs[name] = 0
        if kind == "input":
            c, h, w = layer["shape"]
            return None, (int(c), int(h), int(w))
        c, h, w = in_shapes[0]
        if kind in ("conv2d", "conv_transpose2d"):
            k = _pair(layer, "kernel", None)
            s = _pair(layer, "stride", 1)
            p = _pair(layer, "padding", 0)
            d = _pair(layer, "dilation", 1)
            oc = int(layer["out_channels"])
            bias = bool(layer.get("bias", True))
            if kind == "conv2d":
                mod = nn.Conv2d(c, oc, k, s, p, dilation=d, bias=bias)
                oh, ow = (_out_size(h, k[0], s[0], p[0], d[0]), _out_size(w, k[1], s[1], p[1], d[1]))
                self.macs[name] = oc * oh * ow * c * k[0] * k[1]
            else:
                op = _pair(layer, "output_padding", 0)
                mod = nn.ConvTranspose2d(c, oc, k, s, p, output_padding=op, dilation=d, bias=bias)
                oh = (h - 1) * s[0] - 2 * p[0] + d[0] * (k[0] - 1) + op[0] + 1
                ow = (w - 1) * s[1] - 2 * p[1] + d[1] * (k[1] - 1) + op[1] + 1
                self.macs[name] = c * h * w * oc * k[0] * k[1]
            return mod, (oc, oh, ow)
        if kind in ("maxpool2d", "avgpool2d"):
            k = _pair(layer, "kernel", None)
            s = _pair(layer, "stride", k)
            p = _pair(layer, "padding", 0)
            mod = nn.MaxPool2d(k, s, p) if kind == "maxpool2d" else nn.AvgPool2d(k, s, p, count_include_pad=True)
            return mod, (c, _out_size(h, k[0], s[0], p[0]), _out_size(w, k[1], s[1], p[1]))
        if kind == "relu":
            return nn.ReLU(), (c, h, w)
        if kind == "leaky_relu":
            return nn.LeakyReLU(float(layer.get("alpha", 0.01))), (c, h, w)
        if kind == "tanh":
            return nn.Tanh(), (c, h, w)
        if kind == "sigmoid":
            return nn.Sigmoid(), (c, h, w)
        if kind == "batchnorm":
            return nn.BatchNorm2d(c, eps=float(layer.get("eps", 1e-5)),
                                  momentum=float(layer.get("momentum", 0.1))), (c, h, w)
        if kind == "dropout":
            return nn.Dropout(float(layer.get("p", 0.5))), (c, h, w)
        if kind == "spatial_dropout":
            return nn.Dropout2d(float(layer.get("p", 0.5))), (c, h, w)
        if kind == "concat":
            if any(sh[1:] != (h, w) for sh in in_shapes):
                raise ValueError("concat '%s': inputs differ in height/width: %s" % (name, in_shapes))
            return None, (sum(sh[0] for sh in in_shapes), h, w)
        if kind == "add":
            if any(sh != (c, h, w) for sh in in_shapes):
                raise ValueError("add '%s': input shapes differ: %s" % (name, in_shapes))
            return None, (c, h, w)
        if kind == "flatten":
            return _Flatten(), (c * h * w, 1, 1)
        if kind == "dense":
            if (h, w) != (1, 1):
                raise ValueError("dense '%s': input shape %s; add a flatten layer" % (name, (c, h, w)))
            oc = int(layer["out_features"])
            self.macs[name] = oc * c
            return _Dense(c, oc, bias=bool(layer.get("bias", True))), (oc, 1, 1)
        raise AssertionError(kind)

    def forward(self, x):
        if self.input_mean is not None:  # as the trainer: (x - mean[c]) / std[c] in float32
            x = (x - self.input_mean.view(1, -1, 1, 1)) / self.input_std.view(1, -1, 1, 1)
        vals = {}
        for (name, kind, ins), rel in zip(self.plan, self.release):
            if kind == "input":
                y = x
            elif kind == "concat":
                y = torch.cat([vals[i] for i in ins], 1)
            elif kind == "add":
                y = vals[ins[0]]
                for i in ins[1:]:
                    y = y + vals[i]
            else:
                y = getattr(self, name)(vals[ins[0]])
            for i in rel:
                del vals[i]
            vals[name] = y
        return vals[self.output]

    def input_shape(self):
        return self.shapes[self.inputs[0]]

    def output_shape(self):
        return self.shapes[self.output]

    def forward_flops(self):
        """FLOPs of one sample's forward pass: 2 x multiply-adds of convs, transposed convs, dense."""
        return 2.0 * sum(self.macs.values())


def make_loss(spec):
    loss = spec.get("loss", {"type": "mse"})
    kind = loss.get("type", "mse")
    if kind == "mse":
        return nn.MSELoss()
    if kind == "l1":
        return nn.L1Loss()
    if kind == "huber":
        return nn.HuberLoss(delta=float(loss.get("delta", 1.0)))
    if kind == "softmax_cross_entropy":  # softmax over channels, class-probability targets
        return lambda yhat, y: F.cross_entropy(yhat, y)
    raise ValueError("unknown loss type '%s'" % kind)


def make_optimizer(spec, params):
    """Tessera's defaults (tsr_optim_spec_default): Adam when the section is absent; AdamW weight decay 0.01."""
    o = spec.get("optimizer", {"type": "adam"})
    kind = o.get("type", "adam")
    if kind == "sgd":
        return torch.optim.SGD(params, lr=o.get("lr", 0.01), momentum=o.get("momentum", 0.9),
                               nesterov=bool(o.get("nesterov", False)), weight_decay=o.get("weight_decay", 0.0))
    if kind in ("adam", "adamw"):
        cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        return cls(params, lr=o.get("lr", 1e-3), betas=tuple(o.get("betas", (0.9, 0.999))), eps=o.get("eps", 1e-8),
                   weight_decay=o.get("weight_decay", 0.0 if kind == "adam" else 0.01))
    raise ValueError("unknown optimizer type '%s'" % kind)


def read_exported(path):
    """The arrays of a Tessera export (tsr_params_export): {name: numpy array} from an .h5/.hdf5 file
    (one dataset per name) or a folder of <name>.npy files."""
    import numpy as np
    if path.lower().endswith((".h5", ".hdf5")):
        import h5py
        with h5py.File(path, "r") as f:
            return {k: np.asarray(f[k]) for k in f.keys()}
    return {os.path.basename(p)[:-4]: np.load(p) for p in glob.glob(os.path.join(path, "*.npy"))}


def load_params(net, path):
    """Loads a Tessera export into net: every state_dict tensor (num_batches_tracked excepted) and the
    input normalisation (input_mean, input_std: [C] each), which forward() then applies to raw inputs.
    Returns (input_mean, input_std), (None, None) for an export without them (older ones)."""
    arrays = read_exported(path)
    state = net.state_dict()
    missing = [k for k in state if not k.endswith("num_batches_tracked") and k not in arrays]
    if missing:
        raise ValueError("%s: missing %s" % (path, ", ".join(missing)))
    net.load_state_dict({k: torch.from_numpy(arrays[k]) for k in state if k in arrays}, strict=False)
    if ("input_mean" in arrays) != ("input_std" in arrays):
        raise ValueError("%s: input_mean and input_std come together" % path)
    has = "input_mean" in arrays
    net.input_mean = torch.from_numpy(arrays["input_mean"]).float() if has else None
    net.input_std = torch.from_numpy(arrays["input_std"]).float() if has else None
    return net.input_mean, net.input_std


def load(path):
    """Returns (Net, the parsed JSON)."""
    with open(path) as f:
        spec = json.load(f)
    return Net(spec), spec


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) == 2 else 2
    net, spec = load(sys.argv[1])
    for name, kind, ins in net.plan:
        print("  %-16s %-17s <- %-28s %s" % (name, kind, ",".join(ins), list(net.shapes[name])))
    nparams = sum(p.numel() for p in net.parameters())
    x = torch.randn((2,) + net.input_shape())
    y = net(x)
    print("model '%s': %d layers, %d parameters, %.4g GFLOP per sample (forward), output %s"
          % (net.name, len(net.plan), nparams, 1e-9 * net.forward_flops(), list(y.shape[1:])))
    assert tuple(y.shape[1:]) == net.output_shape()
    return 0


if __name__ == "__main__":
    sys.exit(main())
