#!/usr/bin/python3
"""Weak scaling and the cost of gradient reductions: Tessera under mpirun against PyTorch
DistributedDataParallel (gloo), same model file and local batch, at 1, 2 and 4 ranks on this machine.

For each rank count both are run with their reductions on and off (Tessera: TESSERA_SKIP_ALLREDUCE=1;
DDP: no_sync()), interleaved in rounds so machine noise hits all variants alike. Reported: the step time
per rank, the overhead of the reductions, (step with reductions) / (step without) - 1, and the
throughput against one rank, N x (1-rank step) / (N-rank step). Tessera's 1-rank figure is the better
of a run outside mpirun (--workers CORES) and one under mpirun -np 1, where StarPU-MPI keeps a core for
its progress thread (one worker on two cores); both are printed.

    /usr/bin/python3 bench/bench_scaling.py --tessera-train build/tessera-train [--quick] [--out scaling.json]
"""
import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See bench/README.md.")
    ap.add_argument("--model", default=os.path.join(HERE, "..", "examples", "stemdl", "fcdensenet.json"))
    ap.add_argument("--tessera-train", default="build/tessera-train")
    ap.add_argument("--tessera-datagen", help="default: next to tessera-train")
    ap.add_argument("--ranks", default="1,2,4", help="rank counts (default 1,2,4)")
    ap.add_argument("--batch", type=int, default=16, help="local batch per rank (default 16)")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per run at the largest rank count (default 8)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 3, --quick 1)")
    ap.add_argument("--cores", type=int, default=os.cpu_count(), help="cores shared by the ranks")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--out", help="write the results as JSON here")
    return ap.parse_args()


def mpirun(n):
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n)]


def tessera_step(a, tmp, data, n, skip, alone=False):
    """Seconds per step on each rank, from epoch 2 of the CSV log (epoch 1 warms up and calibrates).
    alone: one process outside mpirun, with a worker on every core."""
    log = os.path.join(tmp, "scale.csv")
    if os.path.exists(log):
        os.remove(log)
    env = dict(os.environ, STARPU_HOME=os.path.join(tmp, "starpu"), STARPU_SILENT="1",
               TESSERA_SKIP_ALLREDUCE="1" if skip else "0")
    argv = [a.tessera_train, "--model", a.model, "--data", data, "--val-fraction", "0", "--epochs", "2",
            "--batch", str(a.batch), "--log", log, "--quiet"]
    if alone:
        argv += ["--workers", str(a.cores)]
    else:
        argv = mpirun(n) + ["-x", "STARPU_HOME", "-x", "STARPU_SILENT", "-x", "TESSERA_SKIP_ALLREDUCE"] + argv
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit("bench_scaling: %s failed:\n%s%s" % (" ".join(argv), r.stdout[-2000:], r.stderr[-2000:]))
    with open(log) as f:
        rows = list(csv.DictReader(f))
    sps = float(rows[-1]["samples_per_s"])
    return a.batch * n / sps




def torch_step(a, tmp, n, skip, port):
    threads = max(1, a.cores // n)
    steps = max(2, a.steps * max(1, 4 // n) // 2)
    argv = ["/usr/bin/python3", os.path.join(HERE, "ddp_worker.py"), "--model", a.model, "--batch", str(a.batch),
            "--steps", str(steps), "--threads", str(threads), "--port", str(port), "--world", str(n)]
    procs = [subprocess.Popen(argv + ["--rank", str(r)] + (["--skip"] if skip else []), stdout=subprocess.PIPE,
                              text=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
             for r in range(n)]
    outs = [p.communicate()[0] for p in procs]
    m = re.search(r"ddp_step_s ([0-9.]+)", outs[0])
    if any(p.returncode for p in procs) or not m:
        sys.exit("bench_scaling: the DDP run with %d ranks failed" % n)
    return float(m.group(1))


def main():
    a = parse_args()
    a.tessera_train = shutil.which(a.tessera_train) or sys.exit("bench_scaling: no tessera-train at %s" % a.tessera_train)
    a.tessera_train = os.path.abspath(a.tessera_train)
    datagen = a.tessera_datagen or os.path.join(os.path.dirname(a.tessera_train), "tessera-datagen")
    ranks = [int(v) for v in a.ranks.split(",")]
    rounds = a.rounds or (1 if a.quick else 3)
    tmp = tempfile.mkdtemp(prefix="tessera-scaling-")
    try:
        data = os.path.join(tmp, "train.h5")
        samples = a.batch * max(ranks) * a.steps
        subprocess.run([datagen, "--out", data, "--samples", str(samples), "--quiet"], check=True)
        res = {n: {k: [] for k in ("tessera", "tessera_skip", "ddp", "ddp_skip")} for n in ranks}
        if 1 in ranks:
            res[1]["tessera_alone"] = []
        port = 29500 + os.getpid() % 1000
        for rd in range(rounds):
            for n in ranks:
                res[n]["tessera"].append(tessera_step(a, tmp, data, n, False))
                res[n]["tessera_skip"].append(tessera_step(a, tmp, data, n, True))
                if n == 1:
                    res[n]["tessera_alone"].append(tessera_step(a, tmp, data, n, False, alone=True))
                if not a.skip_torch:
                    port += 1
                    res[n]["ddp"].append(torch_step(a, tmp, n, False, port))
                    port += 1
                    res[n]["ddp_skip"].append(torch_step(a, tmp, n, True, port))
                print("round %d/%d, %d rank(s) done" % (rd + 1, rounds, n), file=sys.stderr)
        med = {n: {k: statistics.median(v) if v else float("nan") for k, v in r.items()} for n, r in res.items()}
        print("local batch %d, %d cores shared by the ranks, %d round(s); step time per rank in ms (median)" %
              (a.batch, a.cores, rounds))
        base = {"tessera": float("nan"), "ddp": float("nan")}
        if 1 in ranks:
            m = med[1]
            base = {"tessera": min(m["tessera"], m["tessera_alone"]), "ddp": m["ddp"]}
            print("1 rank: tessera-train alone (--workers %d) %.1f ms, under mpirun -np 1 %.1f ms: the baseline is "
                  "the better, %.1f ms" % (a.cores, 1e3 * m["tessera_alone"], 1e3 * m["tessera"], 1e3 * base["tessera"]))
        print("%5s %10s %10s %9s %9s %10s %10s %9s %9s" % ("ranks", "tessera", "no-reduce", "overhead", "vs 1 rank",
                                                           "ddp", "no-reduce", "overhead", "vs 1 rank"))
        for n in ranks:
            m = med[n]
            print("%5d %10.1f %10.1f %8.1f%% %8.2fx %10.1f %10.1f %8.1f%% %8.2fx" % (
                n, 1e3 * m["tessera"], 1e3 * m["tessera_skip"], 100 * (m["tessera"] / m["tessera_skip"] - 1),
                n * base["tessera"] / m["tessera"], 1e3 * m["ddp"], 1e3 * m["ddp_skip"],
                100 * (m["ddp"] / m["ddp_skip"] - 1), n * base["ddp"] / m["ddp"]))
        print("(vs 1 rank: throughput against the 1-rank baseline, N x its step time / the N-rank step time)")
        if a.out:
            with open(a.out, "w") as f:
                json.dump({"batch": a.batch, "cores": a.cores, "rounds": rounds, "raw": res, "median": med,
                           "baseline_1_rank": base}, f, indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
