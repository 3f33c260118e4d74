#!/usr/bin/env python3
"""METG(50%) from taskbench CSV lines (stdin or files): per (pattern, variant, ranks, scheduler), the
smallest task granularity at which efficiency is still >= 50%, interpolated (log granularity, linear
efficiency) towards the next smaller granularity measured.
--wall: from wall-clock efficiency (Task Bench's own: cores x wall time); default: from CPU time
(the CPU time the processes got, every thread: on a shared machine, where the wall clock also counts
other users' time). Prints a Markdown table: one row per pattern, one column per variant x ranks x
scheduler."""
import csv
import math
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


def main():
    rows = defaultdict(list)
    wall = "--wall" in sys.argv
    files = [a for a in sys.argv[1:] if a != "--wall"] or ["-"]
    for name in files:
        f = sys.stdin if name == "-" else open(name)
        for r in csv.reader(l for l in f if l[0] != "#" and not l.startswith("pattern")):
            if len(r) < 12:
                continue
            pat, var, ranks, sched = r[0], r[1], r[2], r[11]
            gran, eff = (r[6], r[7]) if wall else (r[9], r[10])
            rows[(pat, "%s %s r%s" % (sched, var, ranks))].append((float(gran), float(eff)))
    cols = sorted({k[1] for k in rows})
    pats = []
    for k in rows:
        if k[0] not in pats:
            pats.append(k[0])
    print("| pattern | " + " | ".join(cols) + " |")
    print("| --- |" + " ---: |" * len(cols))
    for p in pats:
        cells = []
        for c in cols:
            m = metg(rows.get((p, c), []))
            cells.append("-" if m is None else "%.1f" % m)
        print("| %s | %s |" % (p, " | ".join(cells)))


if __name__ == "__main__":
    main()
