#!/usr/bin/env python3
"""Lion Cub's sign reductions against float32 rings, side by side: bytes per step and step time of
AdamW (float32 ring), Lion (float32 ring), Lion Cub 1-bit (sign1) and p-bit (signp) on a
communication-bound dense model of 11.0 M parameters (bench/dense_10m.json, 16x16 inputs, .npy data
written here) and on the STEMDL example (examples/stemdl/fcdensenet.json), at 2 and 4 ranks, the
configurations interleaved round by round; then validation loss after the same epochs on the example
for AdamW, Lion and Lion Cub 1-bit (2 ranks): AdamW with the example's settings (lr 1e-3, weight decay
1e-4, constant rate), Lion with Lion's usual rule (lr 3.3x smaller, weight decay 10x larger: 3e-4,
1e-3) and a cosine decay of the rate to 0 over the run (per step), chosen on a data set of another
seed (bench/README.md, "Lion Cub").

Over an emulated 1 Gbit/s network when a working netlab is given (--netlab scripts/netlab, as root),
else over shared memory (the network figure is then missing, and the script says so). Tessera sizes
each rank's workers as in a user's run (netlab's default --cpus split; ranks that share the vCPUs get
one worker each): a worker per vCPU in every rank oversubscribed the cores and hid the network's share
(bench/README.md, "Workers per rank").

    python3 bench/bench_lion.py --build build [--netlab scripts/netlab] [--rounds 2]
"""
import argparse
import csv
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
LION = {"type": "lion", "lr": 0.0003, "weight_decay": 0.001}
COSINE = ["--lr-schedule", "cosine,per_step=1"]  # t0: the whole run
CONFIGS = [  # name, optimizer section, --grad-reduce, the convergence run's extra options
    ("adamw-f32", {"type": "adamw", "lr": 0.001, "weight_decay": 0.0001}, "f32", []),
    ("lion-f32", LION, "f32", COSINE),
    ("lioncub-1bit", LION, "sign1", COSINE),
    ("lioncub-pbit", LION, "signp", COSINE),
]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--netlab", help="scripts/netlab, the emulated cluster (1 Gbit/s links)")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--batch", type=int, default=8, help="local batch per rank (default 8)")
    ap.add_argument("--steps", type=int, default=6, help="steps per epoch at the most ranks (default 6)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--conv-samples", type=int, default=256, help="convergence run: samples (default 256)")
    ap.add_argument("--conv-epochs", type=int, default=4, help="convergence run: epochs (default 4)")
    ap.add_argument("--models", default="dense,stemdl", help="speed runs on these (default dense,stemdl)")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-convergence", action="store_true")
    return ap.parse_args()


def write_npy(path, shape, values):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % "".join("%d, " % d for d in shape)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % len(values), *values))


def dense_data(tmp, n):
    """Inputs [n, 1, 16, 16] of smooth patterns, targets [n, 256, 1, 1] a fixed function of them."""
    import math
    xs, ys = [], []
    for s in range(n):
        x = [math.sin(0.37 * (p + 1) * (s % 97 + 1)) * 0.8 for p in range(256)]
        xs += x
        ys += [0.5 * x[p] * x[p] - 0.3 * x[255 - p] for p in range(256)]
    write_npy(os.path.join(tmp, "x.npy"), (n, 1, 16, 16), xs)
    write_npy(os.path.join(tmp, "y.npy"), (n, 256, 1, 1), ys)
    return os.path.join(tmp, "x.npy") + ":" + os.path.join(tmp, "y.npy")


def model_with(tmp, model, name, optim):
    with open(model) as f:
        m = json.load(f)
    m["optimizer"] = optim
    path = os.path.join(tmp, "%s-%s.json" % (os.path.basename(model)[:-5], name))
    with open(path, "w") as f:
        json.dump(m, f)
    return path


def launch(a, ranks, argv, env):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), "-x", "STARPU_HOME", "-x",
           "STARPU_SILENT", "-x", "TESSERA_STEP_TIMEOUT"] + argv
    if a.netlab:
        cmd = [a.netlab, "run", "--nodes", str(ranks), "--rate", a.rate, "--"] + cmd
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode:
        sys.exit("bench_lion: %s failed (%d):\n%s%s" % (" ".join(cmd), r.returncode, r.stdout[-3000:], r.stderr[-3000:]))
    return r.stdout + r.stderr


def train(a, tmp, model, data, ranks, grad_reduce, epochs, val, env, extra=()):
    log = os.path.join(tmp, "epochs.csv")
    if os.path.exists(log):
        os.remove(log)
    out = launch(a, ranks, [os.path.join(a.build, "tessera-train"), "--model", model, "--data", data,
                            "--val-fraction", str(val), "--epochs", str(epochs), "--batch", str(a.batch),
                            "--grad-reduce", grad_reduce, "--seed", "7", "--log", log] + list(extra), env)
    with open(log) as f:
        rows = list(csv.DictReader(f))
    m = re.search(r"([0-9.e+]+) KB sent by rank 0 per training step", out)
    sps = statistics.mean(float(r["samples_per_s"]) for r in rows[1:]) if len(rows) > 1 else float("nan")
    return {"ms": 1e3 * a.batch * ranks / sps, "kb": float(m.group(1)) if m else float("nan"),
            "val": float(rows[-1]["val_loss"]) if val else float("nan"), "train": float(rows[-1]["train_loss"])}


def main():
    a = parse_args()
    a.build = os.path.abspath(a.build)
    if a.netlab:
        r = subprocess.run([a.netlab, "check"], capture_output=True, text=True)
        if r.returncode:
            print("bench_lion: netlab cannot run here (%s): over shared memory instead" % r.stdout.strip())
            a.netlab = None
    tmp = tempfile.mkdtemp(prefix="tessera-bench-lion-")
    env = dict(os.environ, STARPU_HOME=os.path.join(tmp, "starpu"), STARPU_SILENT="1",
               TESSERA_STEP_TIMEOUT="900")
    try:
        ranks = [int(r) for r in a.ranks.split(",")]
        n = a.batch * max(ranks) * a.steps
        stemdl = os.path.join(tmp, "train.h5")
        subprocess.run([os.path.join(a.build, "tessera-datagen"), "-q", "-o", stemdl, "-n", str(max(n, a.conv_samples)),
                        "--seed", "1"], check=True)
        models = [("dense-11M", os.path.join(HERE, "dense_10m.json"), dense_data(tmp, n)),
                  ("stemdl", os.path.join(HERE, "..", "examples", "stemdl", "fcdensenet.json"), stemdl)]
        net = "emulated %s links (netlab)" % a.rate if a.netlab else "shared memory (NO network figure: netlab missing)"
        print("network: %s; local batch %d; %d round(s), medians; load before: %s" % (
            net, a.batch, a.rounds, " ".join("%.2f" % l for l in os.getloadavg())))
        if not a.skip_speed:
            print("%-10s %-5s %-13s %12s %10s %9s %9s" % ("model", "ranks", "config", "KB/step", "ms/step",
                                                           "bytes/f32", "speedup"))
            for mname, model, data in models:
                if mname.split("-")[0] not in a.models.split(","):
                    continue
                paths = {c: model_with(tmp, model, c, o) for c, o, _, _ in CONFIGS}
                for r in ranks:
                    res = {c: [] for c, _, _, _ in CONFIGS}
                    for _ in range(a.rounds):
                        for c, _, red, _ in CONFIGS:
                            res[c].append(train(a, tmp, paths[c], data, r, red, 2, 0, env))
                    med = {c: {k: statistics.median(x[k] for x in v) for k in ("ms", "kb")} for c, v in res.items()}
                    for c, _, _, _ in CONFIGS:
                        print("%-10s %-5d %-13s %12.1f %10.1f %9.4f %8.2fx" % (
                            mname, r, c, med[c]["kb"], med[c]["ms"], med[c]["kb"] / med["lion-f32"]["kb"],
                            med["lion-f32"]["ms"] / med[c]["ms"]), flush=True)
            print("load after speed runs: %s" % " ".join("%.2f" % l for l in os.getloadavg()))
        if not a.skip_convergence:
            sub = os.path.join(tmp, "conv.h5")
            subprocess.run([os.path.join(a.build, "tessera-datagen"), "-q", "-o", sub, "-n", str(a.conv_samples),
                            "--seed", "2"], check=True)
            print("convergence: STEMDL example, %d samples (1/8 validation), %d epochs, 2 ranks x batch %d" % (
                a.conv_samples, a.conv_epochs, a.batch))
            for c, o, red, extra in CONFIGS[:3]:
                path = model_with(tmp, models[1][1], c, o)
                v = train(a, tmp, path, sub, 2, red, a.conv_epochs, 0.125, env, extra)
                print("  %-13s val_loss %.6g  train_loss %.6g" % (c, v["val"], v["train"]), flush=True)
            print("load after: %s" % " ".join("%.2f" % l for l in os.getloadavg()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
