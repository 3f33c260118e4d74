#!/usr/bin/env python3
"""Writes the task graph of one GPU's training steps of an FC-DenseNet-103 (Jegou et al. 2017; the
family of STEMDL's networks) as a Tessera trace folder (rank-0.tsv), for tessera-scale to replay on a
machine file: per conv layer a forward, a backward-data and a backward-weights task whose durations
are FLOPs / a sustained rate plus a per-kernel overhead, one update task per layer, and the gradient
groups cut as Tessera's trainer cuts them (contiguous in backward order, cut between layers once a
group holds --group-bytes; per-layer; or one group at the end of backward, as Horovod without fusion
overlap). One GPU = one worker: its kernels run one at a time.

  python3 stemdl_graph.py OUT_DIR [--layout tessera|layer|end] [--group-bytes B] [--tflops R]
                          [--batch N] [--size S] [--width W] [--steps K]
"""
import argparse
import os


def fc_densenet103(size, width):
    """(name, params, fwd_flops_per_sample) of every conv layer, input 1 x size x size."""
    g = 16 * width
    layers = []

    def conv(name, cin, cout, k, hw):
        layers.append((name, cin * cout * k * k + cout, 2.0 * hw * hw * cin * cout * k * k))

    hw, m = size, 48 * width
    conv("conv0", 1, m, 3, hw)
    skips = []
    for b, n in enumerate([4, 5, 7, 10, 12]):
        for i in range(n):
            conv("db%d_l%d" % (b + 1, i + 1), m, g, 3, hw)
            m += g
        skips.append(m)
        conv("td%d" % (b + 1), m, m, 1, hw)
        hw //= 2
    new = 0
    for i in range(15):
        conv("bottleneck_l%d" % (i + 1), m + new, g, 3, hw)
        new += g
    for b, n in enumerate([12, 10, 7, 5, 4]):
        conv("tu%d" % (b + 1), new, new, 3, hw)  # transposed 3x3 stride 2: FLOPs at the input size x 4
        layers[-1] = (layers[-1][0], layers[-1][1], layers[-1][2] * 4)
        hw *= 2
        m, new = new + skips[-1 - b], 0
        for i in range(n):
            conv("ub%d_l%d" % (b + 1, i + 1), m + new, g, 3, hw)
            new += g
    conv("last", m + new, 1, 1, hw)
    return layers


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layout", choices=["tessera", "layer", "end"], default="tessera")
    ap.add_argument("--group-bytes", type=float, default=256 * 1024)
    ap.add_argument("--tflops", type=float, default=30.0, help="sustained rate per GPU (default 30)")
    ap.add_argument("--overhead-us", type=float, default=20.0, help="per kernel (default 20 us)")
    ap.add_argument("--batch", type=int, default=4, help="samples per GPU per step (default 4)")
    ap.add_argument("--size", type=int, default=512, help="input height and width (default 512)")
    ap.add_argument("--width", type=int, default=1, help="multiply growth rate and stem (default 1)")
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    layers = fc_densenet103(a.size, a.width)
    grp = groups_of(layers, a.layout, a.group_bytes)
    ngroups = max(grp.values()) + 1
    gbytes = [0] * ngroups
    for l, g in grp.items():
        gbytes[g] += layers[l][1] * 4
    rate = a.tflops * 1e6  # FLOPs per us

    def dur(flops):
        return flops * a.batch / rate + a.overhead_us

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
            prev = fwd[l] = task(s, name, "conv2d_fwd", dur(f), deps)
        dnext = task(s, "loss", "loss", a.overhead_us, [prev])
        pending = {}
        for pos, l in enumerate(reversed(range(len(layers)))):
            name, p, f = layers[l]
            bw = task(s, name, "conv2d_bwd_weights", dur(f), [dnext, fwd[l]])
            readers = [bw]  # the update also waits for the backward that reads the weights
            if l > 0:
                dnext = task(s, name, "conv2d_bwd_data", dur(f), [dnext])
                readers.append(dnext)
            pending.setdefault(grp[l], []).append((l, readers))
            nxt = l - 1
            if nxt < 0 or grp[nxt] != grp[l]:  # the group is final: marker, then its updates
                g = grp[l]
                lines.append("group\t%d\t%d\t%d\t%d" % (s, g, gbytes[g], seq))
                for ll, b in pending.pop(g):
                    upd[ll] = task(s, layers[ll][0] + ".weight", "opt_update", a.overhead_us, b)
    with open(os.path.join(a.out, "rank-0.tsv"), "w") as f:
        f.write("\n".join(lines) + "\n")
    params = sum(p for _, p, _ in layers)
    flops = sum(f for _, _, f in layers) * 3 * a.batch
    print("%s: %d conv layers, %.2f M parameters (%.1f MB), %.1f GFLOP per step (fwd+bwd), %.1f ms of kernels "
          "per step at %g TFLOP/s, %d groups (%s)" % (a.out, len(layers), params / 1e6, params * 4e-6,
                                                      flops / 1e9, (t / a.steps) / 1e3, a.tflops, ngroups,
                                                      a.layout))


if __name__ == "__main__":
    main()
