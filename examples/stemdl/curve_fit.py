#!/usr/bin/env python3
"""The table and the fits of learning_curve.sh: reads its curve.csv (one row per run and held-out
set), averages each run's held-out sets, and fits a least-squares line of the average against
log2(training samples) over the runs at the base step budget and model (growth 8), then says at how
many samples each line reaches issue 17's target, or that it does not (flat or falling).
    python3 curve_fit.py curve.csv STEPS
Plain Python (no numpy)."""
import csv
import math
import sys

TARGET_GAP_DB = 3.0  # network over nearest neighbour, held-out materials
TARGET_COLUMNS = 0.9  # fraction of atom columns found within 0.2 A


def line(xs, ys):
    """Least-squares y = a + b x; returns (a, b, r^2)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    syy = sum((y - my) ** 2 for y in ys)
    b = sxy / sxx
    a = my - b * mx
    r2 = sxy * sxy / (sxx * syy) if syy > 0 else 1.0
    return a, b, r2


def reach(a, b, target, now):
    """The samples at which a + b log2(samples) reaches target, as text."""
    if b <= 0:
        return "never: the line is flat or falling (slope %+.3f per doubling)" % b
    x = (target - a) / b
    if x <= now:
        return "already reached"
    if x > 64:
        return "not at any reachable scale (the line gives 2^%.0f samples)" % x
    return "at 2^%.1f = %.3g samples (%.3g times the largest run)" % (x, 2 ** x, 2 ** x / 2 ** now)


def main():
    path, steps = sys.argv[1], int(sys.argv[2])
    runs = {}
    for r in csv.DictReader(open(path)):
        runs.setdefault(r["run"], []).append(r)
    print("| run | training samples | steps | growth | time s (load) | network - NN dB (per set) | mean | "
          "network - mean image dB (mean) | NN - mean image dB (mean) | columns found: network | NN | mean image |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    base = []
    summary = {}  # (samples, steps, growth) -> (gap, over_mean, columns)
    for name, rows in runs.items():
        f = lambda k: [float(r[k]) for r in rows]
        gap = [a - b for a, b in zip(f("net_psnr_db"), f("nn_psnr_db"))]
        over_mean = [a - b for a, b in zip(f("net_psnr_db"), f("mean_psnr_db"))]
        avg = lambda v: sum(v) / len(v)
        r0 = rows[0]
        nn_over_mean = [a - b for a, b in zip(f("nn_psnr_db"), f("mean_psnr_db"))]
        print("| %s | %s | %s | %s | %s (%s) | %s | %+.2f | %+.2f | %+.2f | %.1f%% | %.1f%% | %.1f%% |" % (
            name, r0["samples"], r0["steps"], r0["growth"], r0["seconds"], r0["load"],
            ", ".join("%+.2f" % g for g in gap), avg(gap), avg(over_mean), avg(nn_over_mean), 100 * avg(f("net_columns")),
            100 * avg(f("nn_columns")), 100 * avg(f("mean_columns"))))
        summary[(int(r0["samples"]), int(r0["steps"]), int(r0["growth"]))] = (avg(gap), avg(over_mean),
                                                                               avg(f("net_columns")))
        if int(r0["steps"]) == steps and r0["growth"] == "8":
            base.append((math.log2(int(r0["samples"])), avg(gap), avg(over_mean), avg(f("net_columns"))))
    print()
    if len(base) < 2:
        print("fewer than two runs at %d steps and growth 8: no fit" % steps)
        return
    xs = [b[0] for b in base]
    now = max(xs)
    for what, i, target in (("network - NN (dB)", 1, TARGET_GAP_DB), ("network - mean image (dB)", 2, None),
                            ("columns found (fraction)", 3, TARGET_COLUMNS)):
        a, b, r2 = line(xs, [p[i] for p in base])
        text = "%s = %.3f %+.3f log2(samples) over %d runs at %d steps (r^2 %.2f)" % (what, a, b, len(base), steps, r2)
        if target is not None:
            text += "; reaches %g: %s" % (target, reach(a, b, target, now))
        print("- " + text)
    # the other two axes, each from one pair of runs: more steps at one size, a wider model at one size
    for (n, st, g), v in sorted(summary.items()):
        if st != steps and g == 8 and (n, steps, 8) in summary:
            u = summary[(n, steps, 8)]
            k = math.log2(st / steps)
            print("- steps at %d samples: %d -> %d (x%g): network - NN %+.2f dB, network - mean %+.2f dB, columns %+.1f "
                  "points (per doubling of steps: %+.2f dB, %+.2f dB, %+.1f points)" % (
                      n, steps, st, st / steps, v[0] - u[0], v[1] - u[1], 100 * (v[2] - u[2]), (v[0] - u[0]) / k,
                      (v[1] - u[1]) / k, 100 * (v[2] - u[2]) / k))
        if st == steps and g != 8 and (n, steps, 8) in summary:
            u = summary[(n, steps, 8)]
            print("- growth at %d samples, %d steps: 8 -> %d: network - NN %+.2f dB, network - mean %+.2f dB, columns "
                  "%+.1f points" % (n, steps, g, v[0] - u[0], v[1] - u[1], 100 * (v[2] - u[2])))


main()
