#!/usr/bin/python3
"""Training throughput of Tessera (tessera-train) against PyTorch on the CPU, same model file and batch,
measured side by side in interleaved rounds (per model: Tessera in float32 and bf16, every PyTorch
configuration; then SGEMM on 1 and on --threads cores, then again) so that a shared machine's noise
hits all alike. Two models by default: the STEMDL example (64x64, batch 32) and a variant its tuning
never saw (examples/stemdl/make_model.py with widths x1.5, 96x96, batch 24).

PyTorch is run in each of several configurations and Tessera is compared with the best one: intra-op
threads (torch.set_num_threads: --threads and 1), OPENBLAS_NUM_THREADS=1 or unset (OpenBLAS's own
thread pool competes with PyTorch's OpenMP threads), OMP_NUM_THREADS = the thread count or unset,
glibc's malloc as it is or keeping freed memory (--torch-malloc; fresh pages fault in slowly on some
VMs), and the default (NCHW) or channels_last memory format. Environment variables only act before torch is
imported, so every configuration is a PyTorch process of its own, started once and kept for all rounds.

Reports per model samples/s, achieved GFLOP/s (training = 3 x forward FLOPs, convs counted as 2 x MACs)
against OpenBLAS's SGEMM rate on the same cores, peak memory (ru_maxrss of each process; a PyTorch
process holds both memory formats), the ratio Tessera / PyTorch (PyTorch's best configuration by median)
and Tessera bf16 / float32. Run from the repository root with Debian's python3 (torch 1.13):

    /usr/bin/python3 bench/bench_train.py --quick              # smoke test, a few minutes
    /usr/bin/python3 bench/bench_train.py --out bench.json     # full run
"""
import argparse
import copy
import csv
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="See bench/README.md.", formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(HERE, "..", "examples", "stemdl", "fcdensenet.json"),
                    help="model file (default examples/stemdl/fcdensenet.json)")
    ap.add_argument("--tessera-train", help="tessera-train program (default ./build/tessera-train, else PATH)")
    ap.add_argument("--baseline-train", help="a second tessera-train (another build, e.g. main's) measured in the same "
                    "rounds, right before or after --tessera-train's run of each precision (the order alternates "
                    "by round), with a StarPU home of its own; reported as 'baseline' rows and per-round ratios")
    ap.add_argument("--tessera-datagen", help="tessera-datagen program (default next to tessera-train, else PATH)")
    ap.add_argument("--samples", type=int, help="synthetic training samples = one Tessera epoch "
                    "(default 512, --quick 256)")
    ap.add_argument("--size", type=int, default=64, help="pattern side for tessera-datagen (default 64)")
    ap.add_argument("--batch", type=int, default=32, help="samples per step (default 32)")
    ap.add_argument("--variant", default="1.5,96,24",
                    help="the variant model: width scale, side, batch (default 1.5,96,24: make_model.py --stem 24 "
                    "--growth 12 --size 96); 'none' measures --model only")
    ap.add_argument("--precisions", default="f32,bf16", help="tessera-train --precision values (default f32,bf16)")
    ap.add_argument("--threads", type=int, default=2,
                    help="tessera-train --workers, and the cores PyTorch may use (default 2)")
    ap.add_argument("--torch-threads", help="torch.set_num_threads values tried, comma-separated "
                    "(default: --threads and 1)")
    ap.add_argument("--torch-malloc", default="default,keep",
                    help="glibc malloc settings tried for PyTorch, comma-separated: default, and keep "
                    "(MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2^36 MALLOC_TOP_PAD_=2^30: freed memory is kept "
                    "for the next step); default both")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 5, --quick 2)")
    ap.add_argument("--epochs", type=int, help="tessera-train epochs per round; the first is warm-up "
                    "(default 3, --quick 2)")
    ap.add_argument("--quick", action="store_true", help="fewer rounds and repetitions (smoke test)")
    ap.add_argument("--skip-tessera", action="store_true", help="PyTorch and SGEMM only")
    ap.add_argument("--out", help="write the results as JSON to this file")
    a = ap.parse_args()
    a.samples = a.samples or (256 if a.quick else 512)
    a.rounds = a.rounds or (2 if a.quick else 5)
    a.torch_malloc = [v for v in a.torch_malloc.split(",") if v]
    if not a.torch_malloc or any(v not in ("default", "keep") for v in a.torch_malloc):
        ap.error("--torch-malloc takes default, keep or both (comma-separated)")
    a.epochs = a.epochs or (2 if a.quick else 3)
    if a.epochs < 2:
        ap.error("--epochs must be >= 2 (the first epoch is warm-up)")
    try:
        a.variant = None if a.variant == "none" else [float(v) for v in a.variant.split(",")]
        if a.variant and (len(a.variant) != 3 or min(a.variant) <= 0):
            raise ValueError
    except ValueError:
        ap.error("--variant: expected SCALE,SIDE,BATCH or none")
    a.precisions = [p for p in a.precisions.split(",") if p]
    if a.samples < max([a.batch] + ([int(a.variant[2])] if a.variant else [])):
        ap.error("--samples must hold at least one batch")
    try:
        a.torch_threads = sorted({int(v) for v in (a.torch_threads or "%d,1" % a.threads).split(",")}, reverse=True)
    except ValueError:
        ap.error("--torch-threads: expected comma-separated thread counts")
    if min(a.torch_threads) < 1 or max(a.torch_threads) > a.threads:
        ap.error("--torch-threads: counts between 1 and --threads (%d)" % a.threads)
    return a


def find_program(given, name, near=None):
    if given:
        found = shutil.which(given)
        if not found:
            sys.exit("bench_train: %s is not an executable program" % given)
        return os.path.abspath(found)
    for cand in ([os.path.join(near, name)] if near else []) + [os.path.join("build", name)]:
        if os.access(cand, os.X_OK):
            return os.path.abspath(cand)
    found = shutil.which(name)
    if not found:
        sys.exit("bench_train: cannot find %s; build Tessera and pass --%s PATH (or use --skip-tessera)" % (name, name))
    return found


# ---- SGEMM ----

def sgemm_program(tmp):
    """Compiles sgemm_rate.c into tmp; returns a command, or None to fall back to numpy."""
    exe = os.path.join(tmp, "sgemm_rate")
    try:
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "openblas"], capture_output=True, text=True,
                               check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        flags = ["-lopenblas"]
    r = subprocess.run(["gcc", "-O2", os.path.join(HERE, "sgemm_rate.c"), "-o", exe] + flags,
                       capture_output=True, text=True)
    if r.returncode != 0:
        print("bench_train: cannot compile sgemm_rate.c, timing SGEMM through numpy:\n" + r.stderr, file=sys.stderr)
        return None
    return [exe]


NUMPY_SGEMM = """
import sys, time, numpy as np
n, reps = int(sys.argv[1]), int(sys.argv[2])   # threads: OPENBLAS_NUM_THREADS
a = np.random.rand(n, n).astype(np.float32)
b = np.random.rand(n, n).astype(np.float32)
a @ b
best = 1e30
for _ in range(reps):
    t = time.perf_counter()
    a @ b
    best = min(best, time.perf_counter() - t)
print(2.0 * n ** 3 / best * 1e-9)
"""


def sgemm_rate(cmd, reps, threads):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    argv = (cmd + ["1024", str(reps), str(threads)]) if cmd else [sys.executable, "-c", NUMPY_SGEMM, "1024", str(reps)]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    return float(out.split()[-1])


# ---- Tessera ----

def make_dataset(datagen, tmp, a, m):
    path = os.path.join(tmp, "train_%s.h5" % m["name"])
    subprocess.run([datagen, "--out", path, "--samples", str(a.samples), "--size", str(m["size"]), "--quiet"],
                   check=True)
    return path


def run_rss(argv, env):
    """Runs argv; returns (exit status, stdout + stderr, peak resident memory in MiB)."""
    with tempfile.TemporaryFile(mode="w+") as out:
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return p.returncode, out.read(), ru.ru_maxrss / 1024.0


def tessera_run(train, m, tmp, a, epochs, starpu_home, precision):
    """One tessera-train process; returns (samples/s over its epochs after the first: total samples /
    total time, from the CSV log; peak memory in MiB)."""
    log = os.path.join(tmp, "log.csv")
    if os.path.exists(log):
        os.remove(log)
    env = dict(os.environ, STARPU_HOME=starpu_home, STARPU_SILENT="1")
    argv = [train, "--model", m["path"], "--data", m["data"], "--val-fraction", "0", "--epochs", str(epochs),
            "--batch", str(m["batch"]), "--workers", str(a.threads), "--precision", precision, "--log", log, "--quiet"]
    code, out, rss = run_rss(argv, env)
    if code != 0:
        sys.exit("bench_train: %s failed (exit %d):\n%s" % (" ".join(argv), code, out))
    with open(log) as f:
        rows = list(csv.DictReader(f))
    rates = [float(row["samples_per_s"]) for row in rows[1:]]
    if not rates:
        sys.exit("bench_train: %s wrote no epoch rows after the first" % log)
    return len(rates) / sum(1.0 / v for v in rates), rss


# ---- PyTorch ----

class TorchBench:
    """One net per memory format, from the same initial weights; steps on fixed random tensors.
    Runs inside a worker process (torch_worker), whose environment is the configuration's."""

    def __init__(self, model, batch, threads):
        import torch
        import torch_model
        self.torch = torch
        torch.set_num_threads(threads)
        torch.manual_seed(1)
        net, spec = torch_model.load(model)
        self.info = {"flops": net.forward_flops(), "nlayers": len(net.plan), "threads": torch.get_num_threads(),
                     "nconv": sum(k in ("conv2d", "conv_transpose2d") for _, k, _ in net.plan),
                     "nparams": sum(p.numel() for p in net.parameters())}
        self.loss_fn = torch_model.make_loss(spec)
        x = torch.randn((batch,) + net.input_shape())
        y = torch.randn((batch,) + net.output_shape())
        self.runs = {}
        for fmt, mf in (("contiguous", torch.contiguous_format), ("channels_last", torch.channels_last)):
            n = copy.deepcopy(net).to(memory_format=mf).train()
            self.runs[fmt] = (n, torch_model.make_optimizer(spec, n.parameters()), x.to(memory_format=mf),
                              y.to(memory_format=mf))
        self.batch = batch

    def steps(self, fmt, n):
        net, opt, x, y = self.runs[fmt]
        t = time.perf_counter()
        for _ in range(n):
            opt.zero_grad(set_to_none=True)
            loss = self.loss_fn(net(x), y)
            loss.backward()
            opt.step()
        dt = time.perf_counter() - t
        if not self.torch.isfinite(loss):
            sys.exit("bench_train: PyTorch loss is %s" % loss.item())
        return n * self.batch / dt


FORMATS = ("contiguous", "channels_last")
ENV_KEYS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
# glibc's malloc keeping what PyTorch frees (no mmap'd chunks, no trimming): the activations of the
# next step reuse pages instead of faulting fresh ones in; on a VM whose page faults are slow this
# made PyTorch several times faster (bench/README.md)
MALLOC_KEEP = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 36), "MALLOC_TOP_PAD_": str(1 << 30)}


def torch_worker(model, batch, threads, warm):
    """Worker process: warms both formats up, prints the model's figures as JSON, then answers each
    "FORMAT STEPS" line on stdin with the samples/s of that many steps."""
    tb = TorchBench(model, int(batch), int(threads))
    for fmt in FORMATS:   # oneDNN primitives, allocator
        tb.steps(fmt, int(warm))
    print(json.dumps(tb.info), flush=True)
    for line in sys.stdin:
        fmt, n = line.split()
        print(tb.steps(fmt, int(n)), flush=True)
    return 0


class TorchWorker:
    """One PyTorch configuration: torch.set_num_threads(threads) in a process whose environment has
    `env` for OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and glibc's malloc (MALLOC_KEEP; absent there: unset)."""

    def __init__(self, a, m, threads, env):
        self.threads, self.env = threads, env
        self.name = "t%d%s%s%s" % (threads, " ob%s" % env["OPENBLAS_NUM_THREADS"] if "OPENBLAS_NUM_THREADS" in env else "",
                                   " omp%s" % env["OMP_NUM_THREADS"] if "OMP_NUM_THREADS" in env else "",
                                   " mk" if "MALLOC_MMAP_MAX_" in env else "")
        penv = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
        penv.update(env)
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--torch-worker", m["path"], str(m["batch"]),
                                   str(threads), str(2 if a.quick else 3)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=penv)
        self.info = json.loads(self.read())

    def read(self):
        line = self.p.stdout.readline()
        if not line:
            sys.exit("bench_train: the PyTorch process (%s) ended with status %s" % (self.name, self.p.wait()))
        return line

    def steps(self, fmt, n):
        self.p.stdin.write("%s %d\n" % (fmt, n))
        self.p.stdin.flush()
        return float(self.read())

    def close(self):
        """Ends the process (once); returns its peak memory in MiB."""
        if self.p.returncode is None:
            self.p.stdin.close()
            _, status, ru = os.wait4(self.p.pid, 0)
            self.p.returncode = os.waitstatus_to_exitcode(status)
            self.rss = ru.ru_maxrss / 1024.0
        return self.rss


def torch_workers(a, m):
    """Every configuration for model m: thread counts x OPENBLAS_NUM_THREADS (unset, 1) x OMP_NUM_THREADS
    (unset, threads) x glibc's malloc (--torch-malloc: default, keep)."""
    workers = []
    for t in a.torch_threads:
        for blas in (None, "1"):
            for omp in (None, str(t)):
                for keep in a.torch_malloc:
                    env = {k: v for k, v in (("OPENBLAS_NUM_THREADS", blas), ("OMP_NUM_THREADS", omp)) if v}
                    if keep == "keep":
                        env.update(MALLOC_KEEP)
                    workers.append(TorchWorker(a, m, t, env))
                    print("PyTorch %s ready (torch.get_num_threads() = %d)" % (workers[-1].name,
                                                                              workers[-1].info["threads"]), flush=True)
    return workers


# ---- report ----

def summarize(values):
    return {"median": statistics.median(values), "best": max(values), "worst": min(values), "all": values}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-worker":
        return torch_worker(*sys.argv[2:6])
    a = parse_args()
    a.model = os.path.abspath(a.model)
    tmp = tempfile.mkdtemp(prefix="tessera-bench-")
    workers = []
    try:
        return run(a, tmp, workers)
    finally:
        for w in workers:
            w.close()
        shutil.rmtree(tmp, ignore_errors=True)


def models(a, tmp):
    """The measured models: --model, and the variant written by make_model.py."""
    out = [{"name": "example", "path": a.model, "label": os.path.relpath(a.model), "size": a.size, "batch": a.batch}]
    if a.variant:
        scale, side, batch = a.variant
        path = os.path.join(tmp, "variant.json")
        args = ["--stem", str(round(16 * scale)), "--growth", str(round(8 * scale)), "--size", str(int(side))]
        subprocess.run([sys.executable, os.path.join(HERE, "..", "examples", "stemdl", "make_model.py"), "-o", path] + args,
                       check=True, capture_output=True)
        out.append({"name": "variant", "path": path, "label": "make_model.py " + " ".join(args), "size": int(side),
                    "batch": int(batch)})
    return out


def report(a, m, res, configs, sg1, sgn, out):
    """The table of model m; adds its figures to out["models"]."""
    info = m["workers"][0].info
    train_flops = 3 * info["flops"]
    best = max((label for _, _, label in configs), key=lambda k: statistics.median(res[k]))
    mo = {"model": m["label"], "side": m["size"], "batch": m["batch"],
          "forward_gflop_per_sample": info["flops"] * 1e-9, "torch_best": best, "results": {},
          "torch_configs": {label: {"threads": w.threads, "env": w.env, "format": fmt} for w, fmt, label in configs}}
    print("\n%s: %s, %d layers, %d convolutions, %d parameters, %.4g GFLOP/sample training, %dx%d, batch %d"
          % (m["name"], m["label"], info["nlayers"], info["nconv"], info["nparams"],
             train_flops * 1e-9, m["size"], m["size"], m["batch"]))
    print("%-26s %10s %9s %9s %11s %9s" % ("", "samples/s", "best", "GFLOP/s", "/ SGEMM %d" % a.threads, "peak MiB"))
    ours = [k + " " + p for p in a.precisions for k in ("tessera", "baseline") if res.get(k + " " + p)]
    rows = [(k, k) for k in ours] + \
        [(label, label + (" *" if label == best else "")) for _, _, label in configs]
    for key, label in rows:
        s = summarize(res[key])
        gf = s["median"] * train_flops * 1e-9
        s.update(gflops=gf, of_sgemm=gf / sgn["median"], peak_mib=m["rss"][key])
        mo["results"][key] = s
        print("%-26s %10.1f %9.1f %9.2f %11.3f %9.0f" % (label, s["median"], s["best"], gf, gf / sgn["median"],
                                                         m["rss"][key]))
    for p in a.precisions:
        if not res["tessera " + p]:
            continue
        per_round = [t / q for t, q in zip(res["tessera " + p], res[best])]
        mo["ratio_tessera_%s_over_pytorch" % p] = {"median_of_rounds": statistics.median(per_round),
                                                   "per_round": per_round}
        print("ratio Tessera %s / PyTorch (best: %s): %.2fx (median of per-round ratios; range %.2f-%.2f)"
              % (p, best, statistics.median(per_round), min(per_round), max(per_round)))
    for p in a.precisions:
        if not res.get("baseline " + p):
            continue
        per_round = [x / y for x, y in zip(res["tessera " + p], res["baseline " + p])]
        mo["ratio_tessera_over_baseline_%s" % p] = {"median_of_rounds": statistics.median(per_round),
                                                    "per_round": per_round}
        print("ratio Tessera / baseline, %s: %.3fx (median of per-round ratios; range %.3f-%.3f)"
              % (p, statistics.median(per_round), min(per_round), max(per_round)))
    if len([p for p in a.precisions if res["tessera " + p]]) == 2:
        p0, p1 = a.precisions[:2]
        per_round = [x / y for x, y in zip(res["tessera " + p1], res["tessera " + p0])]
        mo["ratio_%s_over_%s" % (p1, p0)] = {"median_of_rounds": statistics.median(per_round), "per_round": per_round}
        print("ratio Tessera %s / %s: %.2fx (range %.2f-%.2f)" % (p1, p0, statistics.median(per_round),
                                                                 min(per_round), max(per_round)))
    out["models"][m["name"]] = mo


def run(a, tmp, workers):
    load_start = os.getloadavg()
    ms = models(a, tmp)
    for m in ms:
        m["workers"] = torch_workers(a, m)
        workers += m["workers"]
    sg_cmd = sgemm_program(tmp)
    sg_reps = 3 if a.quick else 8
    print("%d threads, %d interleaved rounds, %d PyTorch configurations x %d formats per model; machine load "
          "%.2f %.2f %.2f" % ((a.threads, a.rounds, len(ms[0]["workers"]), len(FORMATS)) + load_start), flush=True)
    if not a.skip_tessera:
        train = find_program(a.tessera_train, "tessera-train")
        datagen = find_program(a.tessera_datagen, "tessera-datagen", os.path.dirname(train))
        progs = [("tessera", train, os.path.join(tmp, "starpu"))]
        if a.baseline_train:
            base = find_program(a.baseline_train, "tessera-train")
            progs.append(("baseline", base, os.path.join(tmp, "starpu-base")))
        for _, _, home in progs:
            os.makedirs(home)
        for m in ms:
            m["data"] = make_dataset(datagen, tmp, a, m)
            for p in a.precisions:  # warm-up: StarPU calibrates its perfmodels
                for _, prog, home in progs:
                    tessera_run(prog, m, tmp, a, 2, home, p)

    res = {"sgemm 1": [], "sgemm %d" % a.threads: []}
    for m in ms:
        m["configs"] = [(w, fmt, "torch %s %s" % (w.name, "cl" if fmt == "channels_last" else "nchw"))
                        for w in m["workers"] for fmt in FORMATS]
        m["res"] = {k + " " + p: [] for p in a.precisions for k in (["tessera", "baseline"] if a.baseline_train
                                                                   else ["tessera"])}
        m["res"].update({label: [] for _, _, label in m["configs"]})
        m["rss"] = {}
    for r in range(1, a.rounds + 1):
        for m in ms:
            steps = max(1, a.samples // m["batch"])   # one Tessera epoch's worth of steps per PyTorch measurement
            for p in a.precisions if not a.skip_tessera else []:
                for key, prog, home in progs if r % 2 else progs[::-1]:
                    rate, rss = tessera_run(prog, m, tmp, a, a.epochs, home, p)
                    m["res"][key + " " + p].append(rate)
                    m["rss"][key + " " + p] = max(rss, m["rss"].get(key + " " + p, 0))
            for w, fmt, label in m["configs"]:
                m["res"][label].append(w.steps(fmt, steps))
            print("round %d/%d, %s: %s" % (r, a.rounds, m["name"], ", ".join("%s %.1f" % (k, v[-1])
                                                                             for k, v in m["res"].items() if v)),
                  flush=True)
        for threads in (1, a.threads):
            res["sgemm %d" % threads].append(sgemm_rate(sg_cmd, sg_reps, threads))
    for m in ms:
        for w, _, label in m["configs"]:
            m["rss"][label] = w.close()

    sg1, sgn = summarize(res["sgemm 1"]), summarize(res["sgemm %d" % a.threads])
    out = {"threads": a.threads, "rounds": a.rounds, "samples": a.samples, "tessera_epochs": a.epochs,
           "precisions": a.precisions, "sgemm_gflops_1thread": sg1, "sgemm_gflops_%dthreads" % a.threads: sgn,
           "host": platform.node(), "cpus": os.cpu_count(), "loadavg_start": load_start, "models": {}}
    for m in ms:
        report(a, m, m["res"], m["configs"], sg1, sgn, out)
    print("\nSGEMM 1024^3 (OpenBLAS%s): 1 thread median %.1f GFLOP/s (best %.1f), %d threads median %.1f (best %.1f)"
          % ("" if sg_cmd else " via numpy", sg1["median"], sg1["best"], a.threads, sgn["median"], sgn["best"]))
    print("(medians over rounds; / SGEMM %d: GFLOP/s over the %d-thread SGEMM median; peak MiB: ru_maxrss, the\n"
          " largest over rounds for Tessera, over the whole run for a PyTorch process (both formats); torch tN:\n"
          " torch.set_num_threads(N); ob1: OPENBLAS_NUM_THREADS=1; ompN: OMP_NUM_THREADS=N (both unset otherwise);\n"
          " mk: glibc's malloc keeps freed memory (--torch-malloc keep);\n"
          " nchw / cl: default / channels_last memory format; * = PyTorch's best configuration)" % (a.threads, a.threads))
    out["loadavg_end"] = os.getloadavg()
    print("machine load at the end: %.2f %.2f %.2f" % out["loadavg_end"])
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        print("results written to %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
