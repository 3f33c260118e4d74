#!/usr/bin/env python3
"""Writes the task graph of one GPU's training steps of an FC-DenseNet-103 (Jegou et al. 2017; the
family of STEMDL's networks) as a Tessera trace folder (rank-0.tsv), for tessera-scale to replay on a
machine file: per conv layer a forward, a backward-data and a backward-weights task whose durations
are FLOPs / a sustained rate plus a per-kernel overhead, one update task per layer, and the gradient
groups cut as Tessera's trainer cuts them (contiguous in backward order, cut between layers once a
group holds --group-bytes; per-layer; or one group at the end of backward, as Horovod without fusion
overlap). One GPU = one worker: its kernels run one at a time.

  python3 stemdl_graph.py OUT_DIR [--layout tessera|layer|end] [--group-bytes B] [--tflops R]
                          [--batch N] [--size S] [--width W] [--steps K] [--times CSV] [--scale F]

With --times CSV (written by gpu_layer_times.py on a GPU) the forward, backward-data and
backward-weights durations are measured ones, the batch norm + ReLU before each conv included.
--scale F multiplies every task's duration by F; --scale whole takes F from the CSV's
whole_over_parts (the measured whole step over the sum of the measured parts), spreading the work the
parts leave out (concatenations, pooling, dropout, loss, the framework's own) over the layers.
"""
import argparse
import collections
import os
import sys


class Conv(collections.namedtuple("Conv", "name cin cout k hw transposed bn")):
    """One conv layer of FC-DenseNet-103: name, in and out channels, kernel, spatial size of its input
    (the output's is the same, or twice it for the transposed 3x3 stride-2 conv), transposed, and bn
    (a batch norm + ReLU over its input precedes it: every layer but conv0, the tu* and last)."""
    __slots__ = ()

    @property
    def params(self):
        return self.cin * self.cout * self.k * self.k + self.cout

    @property
    def flops(self):
        """Forward FLOPs per sample (the transposed conv's at the input size x 4)."""
        f = 2.0 * self.hw * self.hw * self.cin * self.cout * self.k * self.k
        return f * 4 if self.transposed else f


def conv_layers(size, width):
    """Every conv layer of FC-DenseNet-103 (Conv), input 1 x size x size, in forward order."""
    g = 16 * width
    layers = []

    def conv(name, cin, cout, k, hw, transposed=False, bn=True):
        layers.append(Conv(name, cin, cout, k, hw, transposed, bn))

    hw, m = size, 48 * width
    conv("conv0", 1, m, 3, hw, bn=False)
    skips = []
    for b, n in enumerate([4, 5, 7, 10, 12]):
        for i in range(n):
            conv("db%d_l%d" % (b + 1, i + 1), m, g, 3, hw)
            m += g
        skips.append(m)
        conv("td%d" % (b + 1), m, m, 1, hw)  # then 2x2 max pooling
        hw //= 2
    new = 0
    for i in range(15):
        conv("bottleneck_l%d" % (i + 1), m + new, g, 3, hw)
        new += g
    for b, n in enumerate([12, 10, 7, 5, 4]):
        conv("tu%d" % (b + 1), new, new, 3, hw, transposed=True, bn=False)  # of the new maps only
        hw *= 2
        m, new = new + skips[-1 - b], 0
        for i in range(n):
            conv("ub%d_l%d" % (b + 1, i + 1), m + new, g, 3, hw)
            new += g
    conv("last", m + new, 1, 1, hw, bn=False)
    return layers


def fc_densenet103(size, width):
    """(name, params, fwd_flops_per_sample) of every conv layer, input 1 x size x size."""
    return [(c.name, c.params, c.flops) for c in conv_layers(size, width)]


def groups_of(layers, layout, group_bytes):
    """Group index of each layer (layers in forward order; groups numbered in backward order)."""
    back = list(reversed(range(len(layers))))
    gid, acc, out = 0, 0, {}
    for pos, l in enumerate(back):
        out[l] = gid
        acc += layers[l][1] * 4
        last = pos == len(back) - 1
        if layout == "layer" or (layout == "tessera" and acc >= group_bytes):
            if not last:
                gid, acc = gid + 1, 0
    if layout == "end":
        out = {l: 0 for l in back}
    return out


TIME_COLUMNS = ["layer", "fwd_us", "bwd_data_us", "bwd_weight_us", "bnrelu_fwd_us", "bnrelu_bwd_us"]


def read_times(path, names):
    """Per-layer times of a gpu_layer_times.py CSV ({name: (fwd, bwd_data, bwd_weight, bnrelu_fwd,
    bnrelu_bwd)} in us) and its '# key=value; ...' comment fields; exits if its layers are not names."""
    meta, rows = {}, []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("#"):
                for kv in line[1:].split(";"):
                    if "=" in kv:
                        k, v = kv.split("=", 1)
                        meta.setdefault(k.strip(), v.strip())
            elif line:
                rows.append([x.strip() for x in line.split(",")])
    if not rows or rows[0] != TIME_COLUMNS:
        sys.exit("%s: expected the columns %s" % (path, ",".join(TIME_COLUMNS)))
    rows = rows[1:]
    for i in range(max(len(rows), len(names))):
        got = rows[i][0] if i < len(rows) else None
        want = names[i] if i < len(names) else None
        if got != want:
            sys.exit("%s: layer %d is %s, the network's is %s: not the layer list of FC-DenseNet-103" % (
                path, i + 1, got or "missing (the CSV ends there)", want or "none (the network ends there)"))
    times = {}
    for r in rows:
        if len(r) != len(TIME_COLUMNS):
            sys.exit("%s: layer %s: %d fields, expected %d" % (path, r[0], len(r), len(TIME_COLUMNS)))
        try:
            times[r[0]] = tuple(float(x) for x in r[1:])
        except ValueError:
            sys.exit("%s: layer %s: a time is not a number" % (path, r[0]))
    return times, meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layout", choices=["tessera", "layer", "end"], default="tessera")
    ap.add_argument("--group-bytes", type=float, default=256 * 1024)
    ap.add_argument("--tflops", type=float, default=30.0, help="sustained rate per GPU (default 30)")
    ap.add_argument("--overhead-us", type=float, default=None,
                    help="per kernel, added to every task; also the loss and update tasks' duration "
                         "(default 20 us; 0 with --times, whose times are measured kernels)")
    ap.add_argument("--batch", type=int, default=None,
                    help="samples per GPU per step (default 4; with --times, the CSV's)")
    ap.add_argument("--size", type=int, default=None,
                    help="input height and width (default 512; with --times, the CSV's)")
    ap.add_argument("--width", type=int, default=None,
                    help="multiply growth rate and stem (default 1; with --times, the CSV's)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--times", metavar="CSV",
                    help="per-layer times measured by gpu_layer_times.py instead of FLOPs / --tflops: "
                         "forward = conv forward + the batch norm + ReLU before it, backward-data = conv "
                         "backward-data + the batch norm + ReLU backward, backward-weights = conv "
                         "backward-weights, each plus --overhead-us (default 0 then); the batch, size "
                         "and width are the CSV's (the options, if given, must agree)")
    ap.add_argument("--scale", default="1", metavar="F",
                    help="multiply every task's duration by F (default 1); 'whole': by the --times CSV's "
                         "whole_over_parts (whole step / sum of the measured parts)")
    a = ap.parse_args()
    times, meta = None, {}
    if a.times:
        times, meta = read_times(a.times, [c.name for c in conv_layers(32, 1)])
        for opt in ("batch", "size", "width"):
            if opt not in meta:
                sys.exit("%s: no '# ... %s=N' comment line: the times are for which %s?" % (a.times, opt, opt))
            v = int(meta[opt])
            if getattr(a, opt) is not None and getattr(a, opt) != v:
                sys.exit("%s: measured at %s %d, not --%s %d" % (a.times, opt, v, opt, getattr(a, opt)))
            setattr(a, opt, v)
    if a.scale == "whole":
        if not times or "whole_over_parts" not in meta:
            sys.exit("--scale whole: needs a --times CSV with a '# ... whole_over_parts=R' comment line")
        a.scale = float(meta["whole_over_parts"])
    else:
        try:
            a.scale = float(a.scale)
        except ValueError:
            sys.exit("--scale %s: not a number nor 'whole'" % a.scale)
    if not a.scale > 0:
        sys.exit("--scale: must be positive")
    for opt, v in (("batch", 4), ("size", 512), ("width", 1), ("overhead_us", 0.0 if times else 20.0)):
        if getattr(a, opt) is None:
            setattr(a, opt, v)
    layers = fc_densenet103(a.size, a.width)
    grp = groups_of(layers, a.layout, a.group_bytes)
    ngroups = max(grp.values()) + 1
    gbytes = [0] * ngroups
    for l, g in grp.items():
        gbytes[g] += layers[l][1] * 4
    rate = a.tflops * 1e6  # FLOPs per us

    def dur(flops):
        return flops * a.batch / rate + a.overhead_us

    def dur_of(l, kind):  # kind: 0 forward, 1 backward-data, 2 backward-weights
        if times is None:
            return dur(layers[l][2]) * a.scale
        fwd, bwd_d, bwd_w, bn_f, bn_b = times[layers[l][0]]
        if kind == 0:
            return (fwd + bn_f + a.overhead_us) * a.scale
        if kind == 1:
            return (bwd_d + bn_b + a.overhead_us) * a.scale
        return (bwd_w + (bn_b if l == 0 else 0.0) + a.overhead_us) * a.scale  # layer 0: no backward-data

    os.makedirs(a.out, exist_ok=True)
    lines = ["# tessera trace 1", "rank\t0\tsize\t1\toffset_us\t0.000", "worker\t0\tCUDA_0"]
    seq, t, upd = 0, 0.0, {}

    def task(step, name, op, d, deps):
        nonlocal seq, t
        lines.append("task\t%d\t%d\t0\t%.3f\t%.3f\t%.3f\t0\t%s\t%s\t%s" % (
            seq, step, t, t, t + d, name, op, ",".join(str(x) for x in deps) or "-"))
        t += d
        seq += 1
        return seq - 1

    for s in range(a.steps):
        fwd, prev = {}, None
        for l, (name, p, f) in enumerate(layers):
            deps = [x for x in (prev, upd.get(l)) if x is not None]
            prev = fwd[l] = task(s, name, "conv2d_fwd", dur_of(l, 0), deps)
        dnext = task(s, "loss", "loss", a.overhead_us * a.scale, [prev])
        pending = {}
        for pos, l in enumerate(reversed(range(len(layers)))):
            name, p, f = layers[l]
            bw = task(s, name, "conv2d_bwd_weights", dur_of(l, 2), [dnext, fwd[l]])
            readers = [bw]  # the update also waits for the backward that reads the weights
            if l > 0:
                dnext = task(s, name, "conv2d_bwd_data", dur_of(l, 1), [dnext])
                readers.append(dnext)
            pending.setdefault(grp[l], []).append((l, readers))
            nxt = l - 1
            if nxt < 0 or grp[nxt] != grp[l]:  # the group is final: marker, then its updates
                g = grp[l]
                lines.append("group\t%d\t%d\t%d\t%d" % (s, g, gbytes[g], seq))
                for ll, b in pending.pop(g):
                    upd[ll] = task(s, layers[ll][0] + ".weight", "opt_update", a.overhead_us * a.scale, b)
    with open(os.path.join(a.out, "rank-0.tsv"), "w") as f:
        f.write("\n".join(lines) + "\n")
    params = sum(p for _, p, _ in layers)
    flops = sum(f for _, _, f in layers) * 3 * a.batch
    if times is None:
        source = "at %g TFLOP/s" % a.tflops
    else:
        source = "measured (%s: %s, %s, batch %d)" % (os.path.basename(a.times), meta.get("gpu", "?"),
                                                      meta.get("dtype", "?"), a.batch)
    if a.scale != 1:
        source += " x %g" % a.scale
    print("%s: %d conv layers, %.2f M parameters (%.1f MB), %.1f GFLOP per step (fwd+bwd), %.1f ms of kernels "
          "per step %s, %d groups (%s)" % (a.out, len(layers), params / 1e6, params * 4e-6,
                                          flops / 1e9, (t / a.steps) / 1e3, source, ngroups, a.layout))

if __name__ == "__main__":
    main()
