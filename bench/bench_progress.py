#!/usr/bin/python3
"""Where a rank's cycles go: tessera-train under mpirun with its reductions on and off, per variant of
the progress settings, interleaved run by run, with the CPU time of every thread per training step.

Each run's ranks are sampled from /proc/<pid>/task/<tid>/stat (utime + stime) while rank 0's step log
grows; the CPU time between the end of the first epoch (warm-up) and the last step is divided by the
steps in between, per thread kind: 'MPI' (StarPU-MPI's progress thread; Open MPI's own threads are
also named MPI but sleep), 'CPU n' (StarPU workers; with TESSERA_MPI_PROGRESS=worker the progress
thread is worker 0 and is named 'CPU 0', so its polling counts here), 'main' (the submitting thread),
'other', their total, and the context switches per step and rank (/proc/.../status, voluntary and not: each costs caches). CPU time
per step depends little on the machine's load (spinning threads excepted: they spin longer when the
step is slower); milliseconds per step are wall-clock and are printed with the load average.

    /usr/bin/python3 bench/bench_progress.py --tessera-train build/tessera-train \\
        --variant thread:TESSERA_MPI_PROGRESS=thread --variant worker:TESSERA_MPI_PROGRESS=worker \\
        [--ranks 2] [--rounds 2]

A variant is NAME:VAR=VALUE,VAR=VALUE,... (environment of the ranks; empty for none).
"""
import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(HERE, "..", "examples", "stemdl", "fcdensenet.json"))
    ap.add_argument("--tessera-train", default="build/tessera-train")
    ap.add_argument("--ranks", type=int, default=2, help="ranks under mpirun; 0: one process without mpirun")
    ap.add_argument("--batch", type=int, default=16, help="local batch per rank (default 16)")
    ap.add_argument("--steps", type=int, default=8, help="steps per epoch (default 8)")
    ap.add_argument("--epochs", type=int, default=2, help="epochs per run, the first is warm-up (default 2)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variant", action="append", default=[], help="NAME:VAR=VALUE,... (repeatable)")
    ap.add_argument("--mpirun-args", default="", help="extra mpirun arguments (e.g. for scripts/netlab)")
    ap.add_argument("--prefix", default="", help="command put before mpirun (e.g. 'scripts/netlab run ...')")
    return ap.parse_args()


def thread_cpu(pid):
    """{thread kind: CPU seconds} of one process, from /proc (empty when it is gone)."""
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                s = f.read()
        except OSError:
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        fields = s[s.rindex(")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / TICK
        kind = "main" if tid == str(pid) else "MPI" if name == "MPI" else "CPU" if name.startswith("CPU ") else "other"
        out[kind] = out.get(kind, 0.0) + cpu
        try:  # context switches: each costs the caches of the thread that was running
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                sw = sum(int(l.split()[1]) for l in f if "ctxt_switches:" in l)
        except OSError:
            sw = 0
        out["switches"] = out.get("switches", 0) + sw
    return out


def ranks_of(launcher_pid, exe):
    """Pids of the tessera-train processes under the launcher (any depth)."""
    kids, found = {}, []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                s = f.read()
            ppid = int(s[s.rindex(")") + 2:].split()[1])
            kids.setdefault(ppid, []).append(int(p))
        except (OSError, ValueError):
            pass
    todo = [launcher_pid]
    while todo:
        p = todo.pop()
        for k in kids.get(p, []):
            todo.append(k)
            try:
                if os.path.basename(os.readlink("/proc/%d/exe" % k)) in (exe, "lt-" + exe):
                    found.append(k)
            except OSError:
                pass
    return sorted(found)


def lines(path):
    try:
        with open(path) as f:
            return sum(1 for _ in f) - 1
    except OSError:
        return 0


def run(a, tmp, data, env_extra, skip):
    log, steps = os.path.join(tmp, "epochs.csv"), os.path.join(tmp, "steps.csv")
    for p in (log, steps):
        if os.path.exists(p):
            os.remove(p)
    env = dict(os.environ, STARPU_HOME=os.path.join(tmp, "starpu"), STARPU_SILENT="1",
               TESSERA_SKIP_ALLREDUCE="1" if skip else "0", TESSERA_STEP_TIMEOUT="600", **env_extra)
    names = ["STARPU_HOME", "STARPU_SILENT", "TESSERA_SKIP_ALLREDUCE", "TESSERA_STEP_TIMEOUT"] + list(env_extra)
    launcher = [] if a.ranks == 0 else a.prefix.split() + ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
                                                          str(a.ranks)] + a.mpirun_args.split() + \
        sum((["-x", n] for n in names), [])
    argv = launcher + [a.tessera_train, "--model", a.model, "--data", data, "--val-fraction", "0", "--epochs", str(a.epochs),
         "--batch", str(a.batch), "--log", log, "--step-log", steps, "--quiet"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first, last, pids = None, None, []
    while proc.poll() is None:
        time.sleep(0.1)
        if not pids:
            pids = ranks_of(proc.pid, "tessera-train") if a.ranks else [proc.pid]
            continue
        n = lines(steps)
        snap = [thread_cpu(p) for p in pids]
        if not all(snap):
            continue
        # the first sight of each new step count: CPU time at (about) the end of that step
        if first is None and n >= a.steps:
            first = last = (n, snap)
        elif first is not None and n > last[0]:
            last = (n, snap)
    out = proc.stdout.read()
    if proc.returncode:
        sys.exit("bench_progress: %s failed:\n%s" % (" ".join(argv), out[-3000:]))
    with open(log) as f:
        rows = list(csv.DictReader(f))
    sps = statistics.mean(float(r["samples_per_s"]) for r in rows[1:]) if len(rows) > 1 else float("nan")
    nproc = max(1, a.ranks)
    ms = 1e3 * a.batch * nproc / sps
    cpu = {}
    if first and last and last[0] > first[0]:
        for r0, r1 in zip(first[1], last[1]):
            for k, v in r1.items():
                scale = 1 if k == "switches" else 1e3  # counts; CPU seconds to milliseconds
                cpu[k] = cpu.get(k, 0.0) + scale * (v - r0.get(k, 0.0)) / (last[0] - first[0]) / nproc
    return ms, cpu


def main():
    a = parse_args()
    a.tessera_train = os.path.abspath(shutil.which(a.tessera_train) or a.tessera_train)
    variants = []
    for v in a.variant or ["default:"]:
        name, _, spec = v.partition(":")
        variants.append((name, dict(kv.split("=", 1) for kv in spec.split(",") if kv)))
    tmp = tempfile.mkdtemp(prefix="tessera-progress-")
    try:
        data = os.path.join(tmp, "train.h5")
        datagen = os.path.join(os.path.dirname(a.tessera_train), "tessera-datagen")
        subprocess.run([datagen, "-q", "-o", data, "-n", str(a.batch * max(1, a.ranks) * a.steps), "--seed", "1"], check=True)
        print("%d ranks, local batch %d, %d steps per epoch, epochs 2..%d timed; CPU ms per step per rank" %
              (a.ranks, a.batch, a.steps, a.epochs))
        print("%-10s %-6s %5s %9s %8s %8s %8s %8s %8s %9s  %s" % ("variant", "reduce", "round", "ms/step", "MPI",
                                                                   "workers", "main", "other", "total", "switches",
                                                                   "load (1 min)"))
        res = {}
        for rd in range(a.rounds):
            for name, env in variants:
                for skip in (False, True):
                    ms, cpu = run(a, tmp, data, env, skip)
                    res.setdefault((name, skip), []).append(ms)
                    total = sum(cpu.get(k, 0) for k in ("MPI", "CPU", "main", "other"))
                    print("%-10s %-6s %5d %9.1f %8.1f %8.1f %8.1f %8.1f %8.1f %9.0f  %.2f" % (
                        name, "off" if skip else "on", rd + 1, ms, cpu.get("MPI", 0), cpu.get("CPU", 0),
                        cpu.get("main", 0), cpu.get("other", 0), total, cpu.get("switches", 0), os.getloadavg()[0]),
                        flush=True)
        print("median ms/step: reductions on / off, added")
        for name, _ in variants:
            on, off = statistics.median(res[(name, False)]), statistics.median(res[(name, True)])
            print("%-10s %9.1f %9.1f %+7.1f%%" % (name, on, off, 100 * (on / off - 1)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
