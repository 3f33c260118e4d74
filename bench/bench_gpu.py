#!/usr/bin/env python3
"""Tessera against PyTorch on one GPU: training samples/s of the STEMDL example and of a larger
variant, in float32, bf16 and fp16, measured in interleaved rounds on the same GPU.

Tessera: tessera-train on a tessera-datagen dataset, one CUDA worker (STARPU_NCUDA=1) and --workers
CPU workers, --gpu-only (every task with a CUDA kernel on the GPU), --slices 1; its rate is taken
over the epochs after the first, from its CSV log. PyTorch: the same network (bench/torch_model.py),
same optimizer and batch, steps on random tensors already on the GPU, cudnn.benchmark on, eager in
both memory formats (and torch.compile with --compile), float32 without TF32 (as Tessera's), bf16 and
fp16 under autocast (fp16 with a GradScaler); its best configuration is the baseline. GPU
utilisation and memory are sampled with nvidia-smi during each run.

    python3 bench/bench_gpu.py --tessera-train B/run\\ tessera-train --out gpu.json
See bench/README.md ("GPU"). Needs PyTorch with CUDA; make_model.py writes the variant.
"""
import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_PREC = ("f32", "bf16", "fp16")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="See bench/README.md.")
    ap.add_argument("--tessera-train", required=True,
                    help="command running tessera-train (words split as a shell would, e.g. 'B/run tessera-train')")
    ap.add_argument("--tessera-datagen", help="command running tessera-datagen (default: tessera-train's with "
                    "tessera-datagen as last word)")
    ap.add_argument("--example", default=os.path.join(HERE, "..", "examples", "stemdl", "fcdensenet.json"))
    ap.add_argument("--example-batch", type=int, default=32)
    ap.add_argument("--variant", default="2,256,32",
                    help="WIDTH,SIDE,BATCH: make_model.py --stem 16*WIDTH --growth 8*WIDTH --size SIDE (default 2,256,32)")
    ap.add_argument("--precisions", default="f32,bf16,fp16")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=4, help="tessera-train epochs per run; the first is warm-up")
    ap.add_argument("--steps-per-epoch", type=int, default=12)
    ap.add_argument("--workers", type=int, default=4, help="Tessera's CPU workers (default 4)")
    ap.add_argument("--slices", type=int, default=1)
    ap.add_argument("--no-gpu-only", action="store_true", help="let StarPU's scheduler place tasks on CPUs too")
    ap.add_argument("--torch-seconds", type=float, default=1.5, help="timed seconds per PyTorch configuration")
    ap.add_argument("--compile", default="", help="also torch.compile (channels-last, first round): MODEL or MODEL:PRECISION, comma-separated, e.g. variant:bf16")
    ap.add_argument("--alt", action="append", default=[], metavar="'MODEL:PRECISION VAR=VALUE ...'",
                    help="another Tessera configuration measured in the same rounds for that model and precision, "
                    "with these environment variables (e.g. 'example:f32 STARPU_SCHED=eager'); repeatable")
    ap.add_argument("--trace", help="folder: trace one float32 Tessera run of each model there, with the summary")
    ap.add_argument("--run-limit", type=int, default=120, help="seconds one tessera-train run may take")
    ap.add_argument("--out", help="write the results as JSON to this file")
    ap.add_argument("--device", default="cuda", help="PyTorch's device (cpu: a check of this script on a machine "
                    "without a GPU, with --no-gpu-only --precisions f32; not a measurement)")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.precisions = a.precisions.split(",")
    w, side, batch = a.variant.split(",")
    a.variant = (float(w), int(side), int(batch))
    a.compile = [m for m in a.compile.split(",") if m]
    return a


class GpuSampler:
    """nvidia-smi's utilisation and memory every 200 ms while a run lasts."""

    def __init__(self):
        self.rows, self.p = [], None

    def __enter__(self):
        try:
            self.p = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
                                       "--format=csv,noheader,nounits", "-lms", "200"],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.p = None
            return self
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()
        return self

    def _read(self):
        for line in self.p.stdout:
            try:
                u, m = (float(v) for v in line.split(","))
                self.rows.append((time.time(), u, m))
            except ValueError:
                pass

    def __exit__(self, *exc):
        if self.p:
            self.p.terminate()
            self.p.wait()

    def summary(self, since=None):
        rows = [r for r in self.rows if since is None or r[0] >= since]
        if not rows:
            return {"gpu_util_pct": None, "gpu_mem_mib": None}
        return {"gpu_util_pct": round(sum(r[1] for r in rows) / len(rows), 1),
                "gpu_mem_mib": max(r[2] for r in self.rows)}


def make_models(a, tmp):
    w, side, batch = a.variant
    var = os.path.join(tmp, "variant.json")
    args = ["--stem", str(round(16 * w)), "--growth", str(round(8 * w)), "--size", str(side)]
    subprocess.run([sys.executable, os.path.join(HERE, "..", "examples", "stemdl", "make_model.py"), "-o", var] + args,
                   check=True, capture_output=True)
    return [{"name": "example", "path": os.path.abspath(a.example), "size": 64, "batch": a.example_batch,
             "label": os.path.relpath(a.example)},
            {"name": "variant", "path": var, "size": side, "batch": batch, "label": "make_model.py " + " ".join(args)}]


def tessera_run(a, m, tmp, precision, home, trace=None, extra_env=None):
    log = os.path.join(tmp, "log.csv")
    for f in (log, os.path.splitext(log)[0] + ".config.json"):
        if os.path.exists(f):
            os.remove(f)
    argv = shlex.split(a.tessera_train) + [
        "--model", m["path"], "--data", m["data"], "--val-fraction", "0", "--epochs", str(a.epochs),
        "--batch", str(m["batch"]), "--slices", str(a.slices), "--workers", str(a.workers),
        "--precision", precision, "--log", log, "--quiet"]
    if not a.no_gpu_only:
        argv.append("--gpu-only")
    if trace:
        argv += ["--trace", trace]
    env = dict(os.environ, STARPU_HOME=home, STARPU_SILENT="1")
    if a.device == "cuda":
        env["STARPU_NCUDA"] = "1"
    env.update(extra_env or {})
    t0 = time.time()
    with GpuSampler() as g:
        try:
            p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=a.run_limit)
            code, out = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            code, out = "timeout", (e.stdout or b"").decode() + (e.stderr or b"").decode()
    wall = time.time() - t0
    if code != 0:
        return {"error": "exit %s after %.0f s: %s" % (code, wall, out.strip()[-600:])}
    with open(log) as f:
        rows = list(csv.DictReader(f))
    rates = [float(r["samples_per_s"]) for r in rows[1:]]
    if not rates:
        return {"error": "no epoch after the first in %s" % log}
    # utilisation over the timed epochs only: the run's last sum(epoch times) seconds
    timed = sum(m["samples"] / r for r in rates)
    res = {"samples_per_s": len(rates) / sum(1.0 / r for r in rates), "epochs": rates, "wall_s": round(wall, 1)}
    res.update(g.summary(since=time.time() - timed))
    return res


# ---- PyTorch, in one worker process that keeps its CUDA context ----

def torch_worker(device):
    import torch
    sys.path.insert(0, HERE)
    import torch_model
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(device)
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "gpu": torch.cuda.get_device_name(0) if device == "cuda" else device}
    print(json.dumps(info), flush=True)
    for line in sys.stdin:
        q = json.loads(line)
        try:
            print(json.dumps(torch_config(torch, torch_model, dev, q)), flush=True)
        except Exception as e:  # a configuration that fails (e.g. torch.compile) is reported, not fatal
            print(json.dumps({"error": "%s: %s" % (type(e).__name__, str(e)[:300])}), flush=True)
        if device == "cuda":
            torch.cuda.empty_cache()


def torch_config(torch, torch_model, dev, q):
    torch.manual_seed(1)
    net, spec = torch_model.load(q["model"])
    mf = torch.channels_last if q["fmt"] == "channels_last" else torch.contiguous_format
    net = net.to(dev).to(memory_format=mf).train()
    opt = torch_model.make_optimizer(spec, net.parameters())
    loss_fn = torch_model.make_loss(spec)
    b = q["batch"]
    x = torch.randn((b,) + net.input_shape(), device=dev).to(memory_format=mf)
    y = torch.randn((b,) + net.output_shape(), device=dev).to(memory_format=mf)
    fwd = torch.compile(net) if q.get("compile") else net
    prec = q["precision"]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec)
    scaler = torch.amp.GradScaler(dev.type) if prec == "fp16" else None
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(fwd(x), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    t = time.perf_counter()
    for _ in range(3):
        step()
    sync()
    warm = time.perf_counter() - t
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    n, t = 0, time.perf_counter()
    while n < 5 or time.perf_counter() - t < q["seconds"]:
        loss = step()
        n += 1
        if n % 5 == 0:
            sync()
    sync()
    dt = time.perf_counter() - t
    if not torch.isfinite(loss):
        return {"error": "loss %s" % loss.item()}
    return {"samples_per_s": n * b / dt, "steps": n, "warmup_s": round(warm, 2),
            "torch_peak_mib": round(torch.cuda.max_memory_allocated() / 2**20) if dev.type == "cuda" else None}


class TorchWorker:
    def __init__(self, device):
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--tessera-train", "-", "--torch-worker",
                                   "--device", device],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.info = json.loads(self.p.stdout.readline())

    def run(self, q):
        self.p.stdin.write(json.dumps(q) + "\n")
        self.p.stdin.flush()
        with GpuSampler() as g:
            t0 = time.time()
            line = self.p.stdout.readline()
        if not line:
            sys.exit("bench_gpu: the PyTorch worker died")
        r = json.loads(line)
        r.update(g.summary(since=t0 + r.get("warmup_s", 0)))
        return r

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def torch_configs(a, m, prec):
    out = [("eager", fmt, False) for fmt in ("contiguous", "channels_last")]
    if m["name"] in a.compile or "%s:%s" % (m["name"], prec) in a.compile:
        out.append(("compile", "channels_last", True))
    return out


def sibling(a, name):
    """The command of another program beside tessera-train (same folder, same wrapper words)."""
    words = shlex.split(a.tessera_train)
    words[-1] = os.path.join(os.path.dirname(words[-1]), name)
    return words


def worker_busy(trace, first_step=2):
    """From a trace's rank-0.tsv: per worker, its tasks and the share of the window (first start to
    last end of steps >= first_step) it spent running them; and the operations CPU workers ran."""
    names, tasks = {}, []
    with open(os.path.join(trace, "rank-0.tsv")) as f:
        for line in f:
            w = line.rstrip("\n").split("\t")
            if w[0] == "worker":
                names[int(w[1])] = w[2]
            elif w[0] == "task" and int(w[2]) >= first_step and int(w[3]) >= 0:
                tasks.append((int(w[3]), float(w[5]), float(w[6]), w[9]))
    if not tasks:
        return None
    t0, t1 = min(t[1] for t in tasks), max(t[2] for t in tasks)
    out = {"window_ms": round((t1 - t0) / 1e3, 1), "workers": {}, "cpu_ops": {}}
    for wid, name in names.items():
        mine = [t for t in tasks if t[0] == wid]
        out["workers"][name] = {"tasks": len(mine), "busy_pct": round(100 * sum(t[2] - t[1] for t in mine) / (t1 - t0), 1)}
        if not name.startswith("CUDA"):
            for t in mine:
                out["cpu_ops"][t[3]] = out["cpu_ops"].get(t[3], 0) + 1
    return out


def trace_summary(a, trace):
    p = subprocess.run(sibling(a, "tessera-trace") + [trace], capture_output=True, text=True)
    return (p.stdout + p.stderr).strip()


def main():
    a = parse_args()
    if a.torch_worker:
        return torch_worker(a.device)
    datagen = shlex.split(a.tessera_datagen) if a.tessera_datagen else sibling(a, "tessera-datagen")
    res = {"args": {k: v for k, v in vars(a).items() if k != "torch_worker"}, "runs": []}
    with tempfile.TemporaryDirectory(prefix="bench_gpu.") as tmp:
        home = os.path.join(tmp, "starpu")
        models = make_models(a, tmp)
        for m in models:
            m["samples"] = a.steps_per_epoch * m["batch"]
            m["data"] = os.path.join(tmp, m["name"] + ".h5")
            subprocess.run(datagen + ["--out", m["data"], "--samples", str(m["samples"]), "--size",
                                                    str(m["size"]), "--quiet"], check=True)
        tw = TorchWorker(a.device)
        res["torch"] = tw.info
        print("bench_gpu: %s; torch %s, CUDA %s, cuDNN %s" % (tw.info["gpu"], tw.info["torch"], tw.info["cuda"],
                                                              tw.info["cudnn"]), flush=True)
        for r in range(a.rounds):
            for m in models:
                for prec in a.precisions:
                    row = {"round": r, "model": m["name"], "precision": prec}
                    row["tessera"] = tessera_run(a, m, tmp, prec, home)
                    for alt in a.alt:
                        where, *env = alt.split()
                        if where == "%s:%s" % (m["name"], prec):
                            row.setdefault("alts", {})[" ".join(env)] = tessera_run(
                                a, m, tmp, prec, home, extra_env=dict(kv.split("=", 1) for kv in env))
                    row["torch"] = {}
                    for kind, fmt, comp in torch_configs(a, m, prec):
                        if comp and r > 0:
                            continue
                        row["torch"]["%s-%s" % (kind, fmt)] = tw.run(
                            {"model": m["path"], "batch": m["batch"], "precision": prec, "fmt": fmt,
                             "compile": comp, "seconds": a.torch_seconds})
                    res["runs"].append(row)
                    print_row(row)
                    if a.out:
                        with open(a.out, "w") as f:
                            json.dump(res, f, indent=1)
            if r == 0 and a.trace:  # after the first round, so that a time limit spares them
                traces(a, res, models, tmp, home)
        tw.close()
        res["models"] = [{k: v for k, v in m.items() if k != "data"} for m in models]
    report(res)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


def traces(a, res, models, tmp, home):
    res["traces"] = {}
    for m in models:
        d = os.path.join(a.trace, m["name"])
        t = tessera_run(a, m, tmp, "f32", home, trace=d)
        ok = "error" not in t
        res["traces"][m["name"]] = {"run": t, "summary": trace_summary(a, d) if ok else None,
                                    "workers": worker_busy(d) if ok else None}
        print("bench_gpu: trace of %s (float32): %s" % (m["name"], t.get("error", "%.1f samples/s" % t.get(
            "samples_per_s", 0))))
        print(res["traces"][m["name"]]["summary"] or "", flush=True)
        print("workers (steps 2 on): %s" % json.dumps(res["traces"][m["name"]]["workers"]), flush=True)


def fmt_rate(r):
    return "%.1f" % r["samples_per_s"] if "samples_per_s" in r else "error"


def print_row(row):
    t = row["tessera"]
    tb = ", ".join("%s %s" % (k, fmt_rate(v)) for k, v in row["torch"].items())
    alt = "".join(" (%s: %s)" % (k, fmt_rate(v)) for k, v in row.get("alts", {}).items())
    print("round %d %-8s %-5s Tessera %s%s (GPU %s%%, %s MiB) | PyTorch %s" % (
        row["round"], row["model"], row["precision"], fmt_rate(t), alt, t.get("gpu_util_pct"), t.get("gpu_mem_mib"),
        tb), flush=True)
    for v in [t] + list(row.get("alts", {}).values()) + list(row["torch"].values()):
        if "error" in v:
            print("   error: %s" % v["error"], flush=True)


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


def report(res):
    print("\nmedians over rounds (samples/s); PyTorch's best configuration per round:")
    print("| model | precision | Tessera | GPU util | Tessera, other settings | PyTorch best | config | Tessera / PyTorch |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    keys = []
    for row in res["runs"]:
        if (row["model"], row["precision"]) not in keys:
            keys.append((row["model"], row["precision"]))
    res["summary"] = []
    for mname, prec in keys:
        rows = [r for r in res["runs"] if r["model"] == mname and r["precision"] == prec]
        ts = [r["tessera"]["samples_per_s"] for r in rows if "samples_per_s" in r["tessera"]]
        alts = {}
        for r in rows:
            for k, v in r.get("alts", {}).items():
                if "samples_per_s" in v:
                    alts.setdefault(k, []).append(v["samples_per_s"])
        util = [r["tessera"]["gpu_util_pct"] for r in rows if r["tessera"].get("gpu_util_pct") is not None]
        best, cfgs = [], []
        for r in rows:
            ok = {k: v["samples_per_s"] for k, v in r["torch"].items() if "samples_per_s" in v}
            if ok:
                k = max(ok, key=ok.get)
                best.append(ok[k])
                cfgs.append(k)
        tm, pm = (median(ts) if ts else None), (median(best) if best else None)
        s = {"model": mname, "precision": prec, "tessera": tm, "torch_best": pm, "torch_config": sorted(set(cfgs)),
             "ratio": tm / pm if tm and pm else None, "tessera_gpu_util_pct": median(util) if util else None,
             "tessera_alts": {k: median(v) for k, v in alts.items()}}
        res["summary"].append(s)
        print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            mname, prec, "%.1f" % tm if tm else "error", "%.0f%%" % s["tessera_gpu_util_pct"] if util else "-",
            "; ".join("%s: %.1f" % kv for kv in s["tessera_alts"].items()) or "-",
            "%.1f" % pm if pm else "error", "/".join(s["torch_config"]), "%.2fx" % s["ratio"] if s["ratio"] else "-"))


if __name__ == "__main__":
    main()
