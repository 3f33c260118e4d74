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

With --pairs P, each round runs each framework once instead of twice, and the run itself alternates:
tessera-train with TESSERA_SKIP_ALLREDUCE=alternate:STEPS (STEPS = an epoch's steps) over 1 + 2P
epochs (the first, with reductions, is the warm-up; then P pairs of an epoch without and an epoch
with them), DDP with --alternate P (P pairs of timed blocks, no_sync() then with reductions). The
added cost is then the median over all pairs of all rounds of each pair's with / without - 1: both
halves of a pair ran in the same processes, on the same CPUs, seconds apart, so the differences
between runs (placement, other load) cancel. The link bytes per step are then counted over the
steps with reductions (warm-up included), those without sending next to nothing.

    sudo /usr/bin/python3 bench/bench_netlab.py --tessera-train build/tessera-train \\
        [--rates 1gbit,10gbit] [--layouts 2x1,4x1,2x2] [--rounds 2] [--skip-torch] [--no-trace]
        [--pairs P] [--collective A] [--torch-malloc keep|default] [--torch-format contiguous|channels_last]
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
sys.path.insert(0, HERE)
from bench_train import MALLOC_KEEP  # noqa: E402



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
    ap.add_argument("--pairs", type=int, default=0, metavar="P",
                    help="P pairs (without, with reductions) inside each run instead of separate runs (default 0)")
    ap.add_argument("--collective", help="tessera-train --collective for every Tessera run (default: its own, ring "
                    "on CPUs; auto chooses per group from the links measured at start-up)")
    ap.add_argument("--torch-malloc", choices=("keep", "default"), default="keep",
                    help="glibc malloc for the DDP ranks: keep (MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2^36 "
                    "MALLOC_TOP_PAD_=2^30, freed memory kept: PyTorch's best on VMs where fresh pages fault in "
                    "slowly, see bench_train.py) or glibc's default (default keep)")
    ap.add_argument("--torch-format", choices=("contiguous", "channels_last"), default="contiguous",
                    help="DDP's memory format (default contiguous, NCHW: PyTorch's best in bench_train here)")
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


def run_tessera(a, tmp, data, rate, nodes, k, skip, epochs, extra=()):
    """tessera-train under mpirun in a lab, TESSERA_SKIP_ALLREDUCE=skip: ms per step of each epoch, the
    link bytes, rank 0's reduction bytes per training step (over all steps; nan if not printed)."""
    log = os.path.join(tmp, "epochs.csv")
    if os.path.exists(log):
        os.remove(log)
    env = dict(os.environ, STARPU_HOME=os.path.join(tmp, "starpu"), STARPU_SILENT="1",
               TESSERA_SKIP_ALLREDUCE=skip, TESSERA_STEP_TIMEOUT="600")
    out, link = lab(rate, nodes, k, ["mpirun", "-np", str(nodes * k), "-x", "STARPU_HOME", "-x", "STARPU_SILENT",
                                     "-x", "TESSERA_SKIP_ALLREDUCE", "-x", "TESSERA_STEP_TIMEOUT", a.tessera_train,
                                     "--model", a.model, "--data", data, "--val-fraction", "0", "--epochs",
                                     str(epochs), "--batch", str(a.batch), "--log", log]
                    + (["--collective", a.collective] if a.collective else []) + list(extra), env)
    with open(log) as f:
        ms = [1e3 * a.batch * nodes * k / float(r["samples_per_s"]) for r in csv.DictReader(f)]
    if len(ms) != epochs:
        sys.exit("bench_netlab: %d epochs in tessera-train's log, %d expected" % (len(ms), epochs))
    m = re.search(r"([0-9.e+]+) KB sent by rank 0 per training step", out)
    return ms, link, float(m.group(1)) * 1e3 if m else float("nan")


def tessera(a, tmp, data, rate, nodes, k, skip, trace=None):
    """ms per step (epochs after the first), link bytes per step, reduction bytes per step of rank 0.
    trace: a folder to trace the second (last) of 2 epochs into (the lab's ranks share this file system)."""
    epochs = 2 if trace else 3
    per_epoch = a.samples // (a.batch * nodes * k)
    extra = ["--trace", trace, "--trace-steps", "%d:" % per_epoch] if trace else []
    ms, link, red = run_tessera(a, tmp, data, rate, nodes, k, "1" if skip else "0", epochs, extra)
    sps = statistics.mean(1e3 * a.batch * nodes * k / x for x in ms[1:])  # the mean rate, as before
    return 1e3 * a.batch * nodes * k / sps, link / (epochs * per_epoch), red


def tessera_pairs(a, tmp, data, rate, nodes, k):
    """One run alternating epochs without and with reductions: [(ms without, ms with)] per pair, link
    bytes per step with reductions, reduction bytes per step of rank 0."""
    per_epoch = a.samples // (a.batch * nodes * k)
    epochs = 1 + 2 * a.pairs
    ms, link, red = run_tessera(a, tmp, data, rate, nodes, k, "alternate:%d" % per_epoch, epochs)
    pairs = [(ms[1 + 2 * i], ms[2 + 2 * i]) for i in range(a.pairs)]
    # tessera-train's figure is over all steps: those without reductions sent nothing
    return pairs, link / ((1 + a.pairs) * per_epoch), red * epochs / (1 + a.pairs)


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


def run_ddp(a, rate, nodes, k, port, extra):
    """ddp_worker.py under the lab's mpirun (gloo over the node's link, not loopback): output, link bytes."""
    argv = ["/usr/bin/python3", os.path.join(HERE, "ddp_worker.py"), "--model", a.model, "--batch", str(a.batch),
            "--steps", str(a.steps), "--port", str(port), "--memory-format", a.torch_format] + extra
    # PyTorch's best configuration in bench_train.py on this machine kind: OpenBLAS single-threaded
    # (torch's own threads parallelise) and, with --torch-malloc keep, glibc's malloc keeping freed memory
    env = {"GLOO_SOCKET_IFNAME": "eth0", "OPENBLAS_NUM_THREADS": "1"}
    if a.torch_malloc == "keep":
        env.update(MALLOC_KEEP)
    xs = [v for key in sorted(env) for v in ("-x", key)]
    return lab(rate, nodes, k, ["mpirun", "-np", str(nodes * k)] + xs + argv, dict(os.environ, **env))


def ddp(a, tmp, rate, nodes, k, skip, port):
    out, link = run_ddp(a, rate, nodes, k, port, ["--skip"] if skip else [])
    m = re.search(r"ddp_step_s ([0-9.]+)", out)
    if not m:
        sys.exit("bench_netlab: no step time from DDP:\n" + out[-3000:])
    return 1e3 * float(m.group(1)), link / (a.steps + 2)


def ddp_pairs(a, tmp, rate, nodes, k, port):
    """One DDP run alternating timed blocks without and with reductions: [(ms without, ms with)], link
    bytes per step with reductions (warm-up included)."""
    out, link = run_ddp(a, rate, nodes, k, port, ["--alternate", str(a.pairs)])
    pairs = [(1e3 * float(x), 1e3 * float(y)) for x, y in re.findall(r"ddp_pair_s ([0-9.]+) ([0-9.]+)", out)]
    if len(pairs) != a.pairs:
        sys.exit("bench_netlab: %d pairs from DDP, %d expected:\n%s" % (len(pairs), a.pairs, out[-3000:]))
    return pairs, link / (2 + a.pairs * a.steps)


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
        print("DDP: %s, OPENBLAS_NUM_THREADS=1, glibc malloc %s" % (a.torch_format, a.torch_malloc))
        print("local batch %d, collective %s, %d round(s)%s; ms per step (median), added = with / without reductions - 1%s; "
              "KB/step over node 0's link; hidden = share of Tessera's communication hidden behind computation "
              "(traced run, mean over ranks); no delay added (no netem)" % (
                  a.batch, a.collective or "tessera-train's default", a.rounds, " of %d pairs" % a.pairs if a.pairs else "",
                  " (median over the pairs)" if a.pairs else ""))
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
                pairs = {"tsr": [], "ddp": []}
                for _ in range(a.rounds):
                    if a.pairs:
                        p, link, red = tessera_pairs(a, tmp, data, rate, nodes, k)
                        pairs["tsr"] += p
                        v["tsr"] += [on for _, on in p]
                        v["tsr_skip"] += [off for off, _ in p]
                        v["tsr_link"].append(link), v["tsr_red"].append(red)
                        if not a.skip_torch:
                            port += 1
                            p, link = ddp_pairs(a, tmp, rate, nodes, k, port)
                            pairs["ddp"] += p
                            v["ddp"] += [on for _, on in p]
                            v["ddp_skip"] += [off for off, _ in p]
                            v["ddp_link"].append(link)
                        loads.append(os.getloadavg()[0])
                        continue
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
                added = {}
                for fw in ("tsr", "ddp"):
                    if a.pairs:  # the median of the pairs' own ratios
                        r = [on / off - 1 for off, on in pairs[fw]]
                        added[fw] = statistics.median(r) if r else float("nan")
                    else:
                        added[fw] = med[fw] / med[fw + "_skip"] - 1
                print("%-7s %-6s %9.1f %9.1f %+7.1f%% %9.1f %9.1f %+7.1f%% %9.1f %9.1f %9.1f %6.1f%% %6.2f" % (
                    rate, "%dx%d" % (nodes, k), med["tsr"], med["tsr_skip"], 100 * added["tsr"],
                    med["ddp"], med["ddp_skip"], 100 * added["ddp"], med["tsr_link"] / 1e3,
                    med["tsr_red"] / 1e3, med["ddp_link"] / 1e3,
                    traced["hidden_pct_mean"] if traced else float("nan"), statistics.mean(loads)), flush=True)
                results.append({"rate": rate, "nodes": nodes, "ranks_per_node": k, "raw": v, "median": med,
                                "added": added, "pairs": pairs if a.pairs else None,
                                "traced": traced, "load": loads})
        if a.out:
            with open(a.out, "w") as f:
                json.dump({"batch": a.batch, "collective": a.collective, "torch_malloc": a.torch_malloc,
                           "torch_format": a.torch_format, "rounds": a.rounds, "pairs": a.pairs, "results": results}, f, indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
