#!/usr/bin/env python3
"""Measures, in PyTorch, the per-layer times of FC-DenseNet-103 that stemdl_graph.py --times replays:
for every conv layer of stemdl_graph.conv_layers (the same list) its forward, its backward-data (the
input's gradient only) and its backward-weights (weight and bias gradients only), and the batch norm +
ReLU over its input that precedes it (forward; backward: input, scale and shift gradients), at one
batch, size and dtype. Optionally (--whole, default on) one whole training step of the network built
from the same list (plus its concatenations, 2x2 max pooling, dropout 0.2 and a mean loss), to compare
with the sum of the parts.

On a GPU each time is the median of --repeats runs after --warmup, timed with CUDA events while the
CPU has queued the runs ahead (the kernels run back to back, as in training), cudnn.benchmark on.
Without CUDA it runs on the CPU with time.perf_counter, for testing at tiny sizes.

  python3 gpu_layer_times.py --out times.csv [--batch 4] [--size 512] [--width 1]
                             [--dtype float32|bf16|fp16] [--channels-last] [--repeats 5] [--warmup 2]

The CSV: '# gpu=...; torch=...; ...' then layer,fwd_us,bwd_data_us,bwd_weight_us,bnrelu_fwd_us,
bnrelu_bwd_us, one row per conv in forward order (bnrelu_* are 0 for the layers without one: conv0,
tu*, last; bwd_data_us is 0 for conv0, whose input needs no gradient), then '# ' lines with the
totals and the whole step.
"""
import argparse
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stemdl_graph import TIME_COLUMNS, conv_layers  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bf16": torch.bfloat16,
          "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}
T0 = time.time()


def log(msg):
    sys.stderr.write("[%6.1f s] %s\n" % (time.time() - T0, msg))
    sys.stderr.flush()


class Timer:
    def __init__(self, cuda, warmup, repeats):
        self.cuda, self.warmup, self.repeats = cuda, warmup, max(1, repeats)

    def __call__(self, fn):
        """Median time of fn() in us."""
        for _ in range(self.warmup):
            fn()
        if not self.cuda:
            ts = []
            for _ in range(self.repeats):
                t = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t) * 1e6)
            return statistics.median(ts)
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(self.repeats)]
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(2000000)  # ~1 ms: the CPU queues the runs meanwhile, no launch gaps
        for s, e in ev:
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) * 1e3 for s, e in ev)


class Net:
    """Tensors and functions of the layers, in dtype on dev (batch-norm parameters in float32 on a GPU,
    as under autocast, if the build takes mixed types; else in dtype)."""

    def __init__(self, dev, dtype, channels_last):
        self.dev, self.dtype, self.cl = dev, dtype, channels_last
        self.bn_dtype = torch.float32 if dev.type == "cuda" else dtype
        if self.bn_dtype != dtype:
            try:
                x = self.act(2, 4, 4)
                self.bnrelu(x, *self.bn_params(4))
            except RuntimeError as e:
                log("batch norm with %s parameters over %s fails (%s): parameters in %s" % (
                    self.bn_dtype, dtype, str(e).splitlines()[0], dtype))
                self.bn_dtype = dtype

    def fmt(self, t):
        return t.contiguous(memory_format=torch.channels_last) if self.cl and t.dim() == 4 else t

    def act(self, batch, ch, hw):
        return self.fmt(torch.randn(batch, ch, hw, hw, device=self.dev, dtype=self.dtype))

    def conv_params(self, c):
        shape = (c.cin, c.cout, c.k, c.k) if c.transposed else (c.cout, c.cin, c.k, c.k)
        w = torch.randn(shape, device=self.dev, dtype=torch.float32) * (c.cin * c.k * c.k) ** -0.5
        b = torch.zeros(c.cout, device=self.dev, dtype=torch.float32)
        return self.fmt(w.to(self.dtype)), b.to(self.dtype)

    def bn_params(self, ch):
        kw = dict(device=self.dev, dtype=self.bn_dtype)
        return (torch.ones(ch, **kw), torch.zeros(ch, **kw), torch.zeros(ch, **kw), torch.ones(ch, **kw))

    @staticmethod
    def conv(c, x, w, b):
        if c.transposed:  # 3x3 stride 2: hw -> 2 hw
            return F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1)
        return F.conv2d(x, w, b, padding=c.k // 2)

    @staticmethod
    def bnrelu(x, w, b, rm, rv):
        # F.batch_norm's kernel without its check of more than one value per channel (tiny tests)
        return F.relu(torch.batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5, torch.backends.cudnn.enabled))


def measure_layer(net, timer, c, batch, first):
    """(fwd, bwd_data, bwd_weight, bnrelu_fwd, bnrelu_bwd) in us of conv layer c."""
    x = net.act(batch, c.cin, c.hw)
    w, b = net.conv_params(c)
    with torch.no_grad():
        fwd = timer(lambda: net.conv(c, x, w, b))
    bwd_d = 0.0
    if not first:  # the network's input needs no gradient
        xg = x.detach().requires_grad_()
        y = net.conv(c, xg, w, b)
        g = torch.randn_like(y)
        bwd_d = timer(lambda: torch.autograd.grad(y, xg, g, retain_graph=True))
        del xg, y
    wg, bg = w.detach().requires_grad_(), b.detach().requires_grad_()
    y = net.conv(c, x, wg, bg)
    g = torch.randn_like(y)
    bwd_w = timer(lambda: torch.autograd.grad(y, (wg, bg), g, retain_graph=True))
    del wg, bg, y, g
    bn_f = bn_b = 0.0
    if c.bn:
        bw, bb, rm, rv = net.bn_params(c.cin)
        with torch.no_grad():
            bn_f = timer(lambda: net.bnrelu(x, bw, bb, rm, rv))
        xg, bwg, bbg = x.detach().requires_grad_(), bw.detach().requires_grad_(), bb.detach().requires_grad_()
        y = net.bnrelu(xg, bwg, bbg, rm, rv)
        g = torch.randn_like(y)
        bn_b = timer(lambda: torch.autograd.grad(y, (xg, bwg, bbg), g, retain_graph=True))
    return fwd, bwd_d, bwd_w, bn_f, bn_b


def whole_step(net, timer, convs, batch, size):
    """Median time in us of one forward + loss + backward of the network built from convs."""
    params = {}
    for c in convs:
        w, b = net.conv_params(c)
        ps = [w.requires_grad_(), b.requires_grad_()]
        if c.bn:
            bw, bb, rm, rv = net.bn_params(c.cin)
            ps += [bw.requires_grad_(), bb.requires_grad_(), rm, rv]
        params[c.name] = ps
    leaves = [p for ps in params.values() for p in ps if p.requires_grad]
    x0 = net.act(batch, 1, size)

    def layer(c, x):
        ps = params[c.name]
        if x.shape[1] != c.cin or x.shape[2] != c.hw:
            raise RuntimeError("%s: input %s, the layer list says %d x %d x %d" % (
                c.name, tuple(x.shape), c.cin, c.hw, c.hw))
        if c.bn:
            x = net.bnrelu(x, ps[2], ps[3], ps[4], ps[5])
        y = net.conv(c, x, ps[0], ps[1])
        return F.dropout(y, 0.2, training=True) if c.bn else y

    def forward():
        stack, new, skips = None, [], []
        for c in convs:
            if c.name == "conv0":
                stack = layer(c, x0)
            elif c.name.startswith("td"):  # transition down; the skip is the stack before it
                skips.append(stack)
                stack, new = F.max_pool2d(layer(c, stack), 2), []
            elif c.transposed:  # transition up of the last block's new maps, then the skip
                up = layer(c, torch.cat(new, 1))
                stack, new = torch.cat([up, skips.pop()], 1), []
            elif c.name == "last":
                return layer(c, stack)
            else:  # a dense layer: its maps join the stack
                y = layer(c, stack)
                new.append(y)
                stack = torch.cat([stack, y], 1)
        raise RuntimeError("the layer list has no 'last'")

    def step():
        loss = forward().float().mean()
        return torch.autograd.grad(loss, leaves)

    return timer(step)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the CSV to write")
    ap.add_argument("--batch", type=int, default=4, help="samples (default 4)")
    ap.add_argument("--size", type=int, default=512, help="input height and width, a multiple of 32 "
                    "(default 512)")
    ap.add_argument("--width", type=int, default=1, help="multiply growth rate and stem (default 1)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                    help="tensors' type (default float32; on a GPU with TF32 convs unless --no-tf32)")
    ap.add_argument("--channels-last", action="store_true", help="NHWC activations and weights")
    ap.add_argument("--no-tf32", action="store_true", help="float32 convs without TF32 tensor cores")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs, median kept (default 5)")
    ap.add_argument("--warmup", type=int, default=2, help="runs before timing (default 2)")
    ap.add_argument("--no-whole", action="store_true", help="skip the whole-step cross-check")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU even if CUDA is there")
    a = ap.parse_args()
    if a.size % 32:
        sys.exit("--size must be a multiple of 32 (five 2x2 poolings)")
    cuda = torch.cuda.is_available() and not a.cpu
    dev = torch.device("cuda" if cuda else "cpu")
    dtype = DTYPES[a.dtype]
    if cuda:
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = not a.no_tf32
        torch.backends.cuda.matmul.allow_tf32 = not a.no_tf32
        gpu = torch.cuda.get_device_name(dev)
    else:
        gpu = "cpu %s (%d threads)" % (platform.processor() or platform.machine(), torch.get_num_threads())
    if not cuda and dtype == torch.float16:
        sys.exit("fp16 convolutions need a GPU (PyTorch has no CPU half conv)")
    torch.manual_seed(0)
    net = Net(dev, dtype, a.channels_last)
    tu = conv_layers(a.size, a.width)[-6]
    y = net.conv(tu, net.act(1, 4, 2), *net.conv_params(tu._replace(cin=4, cout=4)))
    if tuple(y.shape[2:]) != (4, 4):  # torch 1.13's CPU bf16 conv_transpose2d drops output_padding
        sys.exit("conv_transpose2d (3x3, stride 2, output_padding 1) in %s on %s gives %s from 2 x 2, "
                 "not 4 x 4: this build cannot time the tu layers" % (a.dtype, dev, tuple(y.shape[2:])))
    timer = Timer(cuda, a.warmup, a.repeats)
    convs = conv_layers(a.size, a.width)
    meta = [("gpu", gpu.replace(";", ",").replace("=", "-")), ("torch", torch.__version__),
            ("cuda", torch.version.cuda if cuda else "none"),
            ("cudnn", torch.backends.cudnn.version() if cuda else "none"), ("dtype", a.dtype),
            ("batch", a.batch), ("size", a.size), ("width", a.width),
            ("channels_last", int(a.channels_last)),
            ("tf32", int(cuda and dtype == torch.float32 and not a.no_tf32)),
            ("bn_params", str(net.bn_dtype).replace("torch.", "")), ("warmup", a.warmup),
            ("repeats", a.repeats), ("timer", "cuda-events" if cuda else "perf_counter")]
    log("%d conv layers on %s: %s" % (len(convs), gpu, "; ".join("%s=%s" % kv for kv in meta[1:])))
    tot = [0.0] * 5
    with open(a.out, "w") as f:
        f.write("# " + "; ".join("%s=%s" % kv for kv in meta) + "\n")
        f.write(",".join(TIME_COLUMNS) + "\n")
        for i, c in enumerate(convs):
            t = measure_layer(net, timer, c, a.batch, i == 0)
            tot = [x + y for x, y in zip(tot, t)]
            f.write("%s,%s\n" % (c.name, ",".join("%.2f" % x for x in t)))
            f.flush()
            log("%3d/%d %-14s %4d->%-4d k%d %4d%s: fwd %9.1f  bwd_data %9.1f  bwd_w %9.1f  bnrelu %8.1f "
                "%8.1f us" % (i + 1, len(convs), c.name, c.cin, c.cout, c.k, c.hw,
                              " T" if c.transposed else "  ", *t))
        parts = sum(tot)
        f.write("# sum_us=%.1f; fwd_us=%.1f; bwd_data_us=%.1f; bwd_weight_us=%.1f; bnrelu_fwd_us=%.1f; "
                "bnrelu_bwd_us=%.1f\n" % (parts, *tot))
        f.flush()
        log("sum of the parts: %.2f ms per step (conv fwd %.2f, bwd_data %.2f, bwd_weight %.2f, "
            "bnrelu fwd %.2f, bwd %.2f)" % tuple(x / 1e3 for x in [parts] + tot))
        if not a.no_whole:
            if cuda:
                torch.cuda.empty_cache()
            try:
                whole = whole_step(net, timer, convs, a.batch, a.size)
                f.write("# whole_step_us=%.1f; sum_of_parts_us=%.1f; whole_over_parts=%.3f\n" % (
                    whole, parts, whole / parts))
                log("whole step (+ concat, pooling, dropout, loss): %.2f ms, %.3f x the sum of the parts"
                    % (whole / 1e3, whole / parts))
            except RuntimeError as e:  # out of memory among others: the per-layer times stand
                msg = str(e).splitlines()[0][:200].replace(";", ",")
                f.write("# whole_step_failed=%s\n" % msg)
                log("whole step failed: %s" % msg)
    log("wrote %s" % a.out)


if __name__ == "__main__":
    main()
