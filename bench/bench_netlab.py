#!/usr/bin/python3
"""The cost of gradient reductions over an emulated network (scripts/netlab, as root): Tessera under
mpirun against PyTorch DistributedDataParallel (gloo), same model file and local batch, over the same
shaped links, with and without their reductions, interleaved run by run.

For each configuration (link rate x nodes x ranks per node) and round: tessera-train with reductions
and with TESSERA_SKIP_ALLREDUCE=1, then DDP with and without no_sync(), each in a fresh lab. Reported
per configuration (medians over rounds): ms per step with and without reductions and the added cost,
for both; bytes per step that crossed node 0's link (tc counters, control traffic included) and the
reduction bytes Tessera's rank 0 sent; the load average during the configuration's runs. After the
rounds, one more tessera-train with reductions (2 epochs, --trace of the second: the first is the
warm-up), not counted in the step times: the share of its communication hidden behind computation,
from `tessera-trace` (per rank, the union of a step's transfers during which a worker of the rank ran a
task), mean over the ranks (--no-trace skips it).

    sudo /usr/bin/python3 bench/bench_netlab.py --tessera-train build/tessera-train \\
        [--rates 1gbit,10gbit] [--layouts 2x1,4x1,2x2] [--rounds 2] [--skip-torch] [--no-trace]
        [--out FILE.json]

A layout NxK is N nodes of K ranks (ranks of one node share memory). The machine's CPUs are split
among the nodes (netlab --cpus split); on a machine with fewer cores than ranks the ranks share them.
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

HERE = os.path.dirname(os.path.abspath(__file__))
NETLAB = os.path.join(HERE, "..", "scripts", "netlab")



def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(HERE, "..", "examples", "stemdl", "fcdensenet.json"))
    ap.add_argument("--tessera-train", default="build/tessera-train")
    ap.add_argument("--rates", default="1gbit,10gbit", help="link rates, tc units (default 1gbit,10gbit)")
    ap.add_argument("--layouts", default="2x1,4x1,2x2", help="nodes x ranks per node (default 2x1,4x1,2x2)")
    ap.add_argument("--batch", type=int, default=16, help="local batch per rank (default 16)")
    ap.add_argument("--steps", type=int, default=8,
                    help="steps per epoch at the most ranks, and DDP's timed steps (default 8)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--no-trace", action="store_true", help="no traced run (no hidden-communication column)")
    ap.add_argument("--out", help="write the results as JSON here")
    return ap.parse_args()


def lab(rate, nodes, k, command, env):
    argv = [NETLAB, "run", "--nodes", str(nodes), "--ranks-per-node", str(k), "--rate", rate, "--"] + command
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    if r.returncode:
        sys.exit("bench_netlab: %s failed (%d):\n%s%s" % (" ".join(argv), r.returncode, r.stdout[-3000:],
                                                          r.stderr[-3000:]))
    m = re.search(r"netlab: n0 sent (\d+) bytes", r.stderr)
    return r.stdout + r.stderr, int(m.group(1)) if m else 0


def tessera(a, tmp, data, rate, nodes, k, skip, trace=None):
    """ms per step (epochs after the first), link bytes per step, reduction bytes per step of rank 0.
    trace: a folder to trace the second (last) of 2 epochs into (the lab's ranks share this file system)."""
    log = os.path.join(tmp, "epochs.csv")
    if os.path.exists(log):
        os.remove(log)
    env = dict(os.environ, STARPU_HOME=os.path.join(tmp, "starpu"), STARPU_SILENT="1",
               TESSERA_SKIP_ALLREDUCE="1" if skip else "0", TESSERA_STEP_TIMEOUT="600")
    epochs = 2 if trace else 3
    per_epoch = a.samples // (a.batch * nodes * k)
    extra = ["--trace", trace, "--trace-steps", "%d:" % per_epoch] if trace else []
    out, link = lab(rate, nodes, k, ["mpirun", "-np", str(nodes * k), "-x", "STARPU_HOME", "-x", "STARPU_SILENT",
                                     "-x", "TESSERA_SKIP_ALLREDUCE", "-x", "TESSERA_STEP_TIMEOUT", a.tessera_train,
                                     "--model", a.model, "--data", data, "--val-fraction", "0", "--epochs",
                                     str(epochs), "--batch", str(a.batch), "--log", log] + extra, env)
    with open(log) as f:
        rows = list(csv.DictReader(f))
    sps = statistics.mean(float(r["samples_per_s"]) for r in rows[1:])
    m = re.search(r"([0-9.e+]+) KB sent by rank 0 per training step", out)
    steps = epochs * per_epoch
    return 1e3 * a.batch * nodes * k / sps, link / steps, float(m.group(1)) * 1e3 if m else float("nan")


def hidden(a, trace):
    """Per rank (communication ms per step, % of it hidden behind computation) from tessera-trace's summary."""
    r = subprocess.run([a.tessera_trace, trace], capture_output=True, text=True)
    if r.returncode:
        sys.exit("bench_netlab: tessera-trace %s failed (%d):\n%s%s" % (trace, r.returncode, r.stdout[-3000:],
                                                                       r.stderr[-3000:]))
    # rank  steps  wall/step  critical path  computing   idle  communication  hidden
    rows = re.findall(r"^\s*(\d+)\s+\d+\s+[0-9.]+ ms\s+[0-9.]+ ms\s+[0-9.]+%\s+[0-9.]+%\s+([0-9.]+) ms\s+(\S+)\s*$",
                      r.stdout, re.M)
    if not rows:
        sys.exit("bench_netlab: no per-rank communication in tessera-trace's summary:\n" + r.stdout[-3000:])
    return {int(rank): (float(comm), float(hid.rstrip("%")) if hid != "-" else float("nan"))
            for rank, comm, hid in rows}


def ddp(a, tmp, rate, nodes, k, skip, port):
    argv = ["/usr/bin/python3", os.path.join(HERE, "ddp_worker.py"), "--model", a.model, "--batch", str(a.batch),
            "--steps", str(a.steps), "--port", str(port)] + (["--skip"] if skip else [])
    out, link = lab(rate, nodes, k, ["mpirun", "-np", str(nodes * k)] + argv,
                    dict(os.environ, GLOO_SOCKET_IFNAME="eth0"))  # the node's link, not loopback
    m = re.search(r"ddp_step_s ([0-9.]+)", out)
    if not m:
        sys.exit("bench_netlab: no step time from DDP:\n" + out[-3000:])
    return 1e3 * float(m.group(1)), link / (a.steps + 2)


def main():
    a = parse_args()
    a.tessera_train = os.path.abspath(shutil.which(a.tessera_train) or a.tessera_train)
    a.tessera_trace = os.path.join(os.path.dirname(a.tessera_train), "tessera-trace")
    r = subprocess.run([NETLAB, "check"], capture_output=True, text=True)
    if r.returncode:
        sys.exit("bench_netlab: " + (r.stdout.strip() or "netlab check failed"))
    layouts = [tuple(int(v) for v in l.split("x")) for l in a.layouts.split(",")]
    rates = a.rates.split(",")
    tmp = tempfile.mkdtemp(prefix="tessera-netlab-bench-")
    results = []
    try:
        data = os.path.join(tmp, "train.h5")
        nmax = max(n * k for n, k in layouts)
        datagen = os.path.join(os.path.dirname(a.tessera_train), "tessera-datagen")
        a.samples = a.batch * nmax * a.steps
        subprocess.run([datagen, "-q", "-o", data, "-n", str(a.samples), "--seed", "1"], check=True)
        port = 29500 + os.getpid() % 1000
        print("local batch %d, %d round(s); ms per step (median), added = with / without reductions - 1; "
              "KB/step over node 0's link; hidden = share of Tessera's communication hidden behind computation "
              "(traced run, mean over ranks); no delay added (no netem)" % (a.batch, a.rounds))
        print("%-7s %-6s %9s %9s %8s %9s %9s %8s %9s %9s %9s %7s %6s" % (
            "rate", "layout", "tsr", "tsr-skip", "added", "ddp", "ddp-skip", "added", "tsr-link", "tsr-red",
            "ddp-link", "hidden", "load"))
        for rate in rates:
            for nodes, k in layouts:
                # one rank per node first: StarPU calibrates each node's files alone (see scripts/netlab)
                if k > 1:
                    tessera(a, tmp, data, rate, nodes, 1, True)
                v = {key: [] for key in ("tsr", "tsr_skip", "ddp", "ddp_skip", "tsr_link", "tsr_red", "ddp_link")}
                loads = [os.getloadavg()[0]]
                for _ in range(a.rounds):
                    ms, link, red = tessera(a, tmp, data, rate, nodes, k, False)
                    v["tsr"].append(ms), v["tsr_link"].append(link), v["tsr_red"].append(red)
                    v["tsr_skip"].append(tessera(a, tmp, data, rate, nodes, k, True)[0])
                    if not a.skip_torch:
                        port += 1
                        ms, link = ddp(a, tmp, rate, nodes, k, False, port)
                        v["ddp"].append(ms), v["ddp_link"].append(link)
                        port += 1
                        v["ddp_skip"].append(ddp(a, tmp, rate, nodes, k, True, port)[0])
                    loads.append(os.getloadavg()[0])
                traced = None
                if not a.no_trace:
                    trace = os.path.join(tmp, "trace-%s-%dx%d" % (rate, nodes, k))
                    ms = tessera(a, tmp, data, rate, nodes, k, False, trace)[0]
                    ranks = hidden(a, trace)
                    shares = [h for _, h in ranks.values() if h == h]
                    traced = {"ms_per_step": ms, "comm_ms_per_step": {r: c for r, (c, _) in ranks.items()},
                              "hidden_pct": {r: h for r, (_, h) in ranks.items()},
                              "hidden_pct_mean": statistics.mean(shares) if shares else float("nan")}
                    shutil.rmtree(trace, ignore_errors=True)
                    loads.append(os.getloadavg()[0])
                med = {key: statistics.median(x) if x else float("nan") for key, x in v.items()}
                print("%-7s %-6s %9.1f %9.1f %+7.1f%% %9.1f %9.1f %+7.1f%% %9.1f %9.1f %9.1f %6.1f%% %6.2f" % (
                    rate, "%dx%d" % (nodes, k), med["tsr"], med["tsr_skip"], 100 * (med["tsr"] / med["tsr_skip"] - 1),
                    med["ddp"], med["ddp_skip"], 100 * (med["ddp"] / med["ddp_skip"] - 1), med["tsr_link"] / 1e3,
                    med["tsr_red"] / 1e3, med["ddp_link"] / 1e3,
                    traced["hidden_pct_mean"] if traced else float("nan"), statistics.mean(loads)), flush=True)
                results.append({"rate": rate, "nodes": nodes, "ranks_per_node": k, "raw": v, "median": med,
                                "traced": traced, "load": loads})
        if a.out:
            with open(a.out, "w") as f:
                json.dump({"batch": a.batch, "rounds": a.rounds, "results": results}, f, indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
