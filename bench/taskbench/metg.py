#!/usr/bin/env python3
"""METG(50%) from taskbench CSV lines (stdin or files): per (pattern, variant, ranks, scheduler), the
smallest task granularity at which efficiency is still >= 50%, interpolated (log granularity, linear
efficiency) towards the next smaller granularity measured.
--wall: from wall-clock efficiency (Task Bench's own: cores x wall time); default: from CPU time
(the CPU time the processes got, every thread: on a shared machine, where the wall clock also counts
other users' time). Prints a Markdown table: one row per pattern, one column per variant x ranks x
scheduler; with --best, also bare StarPU at its best scheduler against Tessera at the same one."""
import csv
import math
import statistics
import sys
from collections import defaultdict


def metg(points):
    """The smallest granularity measured at >= 50%, interpolated (log granularity, linear efficiency)
    towards the next smaller one, which fell below: a noisy or warming-up point above it (dmdas
    calibrates its models in the first runs) does not end the search."""
    pts = sorted(points, key=lambda p: -p[0])  # large grains first
    above = [i for i, (_, e) in enumerate(pts) if e >= 0.5]
    if not above:
        return None
    i = above[-1]
    if i + 1 == len(pts):
        return pts[i][0]  # never below 50%: at most the smallest measured
    (g0, e0), (g1, e1) = pts[i], pts[i + 1]
    f = (e0 - 0.5) / (e0 - e1)
    return math.exp(math.log(g0) + f * (math.log(g1) - math.log(g0)))


def cell(values):
    """A cell over repeated runs: the median METG, with the range when there are several."""
    if not values or any(v is None for v in values):
        return None, "-"
    v = sorted(values)
    med = statistics.median(v)
    return med, "%.1f" % med if len(v) == 1 else "%.1f (%.1f-%.1f)" % (med, v[0], v[-1])


def main():
    """Columns: scheduler x variant x ranks; a CSV line's 13th field, where present, numbers the
    repeat (run_quiet.sh), and a cell is then the median over repeats (a repeat that never reached
    50% makes it "-"). --best: a second table, per pattern, bare StarPU at its best scheduler and
    Tessera at the same one, and their ratio."""
    runs = defaultdict(list)
    wall = "--wall" in sys.argv
    best = "--best" in sys.argv
    files = [a for a in sys.argv[1:] if not a.startswith("--")] or ["-"]
    pats = []
    for name in files:
        f = sys.stdin if name == "-" else open(name)
        for r in csv.reader(l for l in f if l[0] != "#" and not l.startswith("pattern")):
            if len(r) < 12:
                continue
            pat, var, ranks, sched = r[0], r[1], r[2], r[11]
            rep = r[12] if len(r) > 12 else "0"
            gran, eff = (r[6], r[7]) if wall else (r[9], r[10])
            runs[(pat, (sched, var, ranks), rep)].append((float(gran), float(eff)))
            if pat not in pats:
                pats.append(pat)
    table = defaultdict(list)  # (pattern, column) -> METG of each repeat
    for (pat, col, _), points in runs.items():
        table[(pat, col)].append(metg(points))
    cols = sorted({k[1] for k in table}, key=lambda c: (c[2], c[0], c[1]))
    print("| pattern | " + " | ".join("%s %s r%s" % c for c in cols) + " |")
    print("| --- |" + " ---: |" * len(cols))
    for p in pats:
        print("| %s | %s |" % (p, " | ".join(cell(table.get((p, c), []))[1] for c in cols)))
    if not best:
        return
    print("\n| pattern | ranks | best scheduler (bare StarPU) | starpu | tessera | tessera / starpu |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for p in pats:
        for ranks in sorted({c[2] for c in cols}):
            scheds = sorted({c[0] for c in cols if c[2] == ranks})
            sp = {s: cell(table.get((p, (s, "starpu", ranks)), []))[0] for s in scheds}
            ok = [s for s in scheds if sp[s] is not None]
            if not ok:
                print("| %s | %s | - | - | - | - |" % (p, ranks))
                continue
            s = min(ok, key=lambda k: sp[k])
            ts, tstext = cell(table.get((p, (s, "tessera", ranks)), []))
            ratio = "-" if ts is None else "%.2f" % (ts / sp[s])
            print("| %s | %s | %s | %s | %s | %s |" % (p, ranks, s, cell(table[(p, (s, "starpu", ranks))])[1],
                                                      tstext, ratio))


if __name__ == "__main__":
    main()
