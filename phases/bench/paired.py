#!/usr/bin/env python3
"""Paired ratios over rounds, shared by the bench scripts.

On this kind of machine (a VM whose speed drifts by 20-40% over minutes)
a ratio of pooled medians mixes the drift into the verdict; pairing each
prism block with the peer block run next to it in the same round cancels
it. So the verdict of a cell is the median over rounds of (median prism
sample / median peer sample within the round), with a 90% bootstrap
interval that resamples rounds: how far the verdict could move with other
rounds.

As a module: paired_ratios(), interval() and fmt_interval() (metadata.sh
and checkpoint.sh import them).
As a script: paired.py SAMPLES.tsv [TITLE] prints one table. SAMPLES has
one sample per line, tab-separated: cell, side, round, value, unit, where
value is a rate (higher is better) and side "prism" is compared against
every other side of the same cell, in the order the sides first appear.
A line "cell<TAB>skip<TAB>reason" prints the cell as not run; a cell with
only prism's side (no peer exists) prints prism's median alone; lines
starting with "#" are ignored.

paired.py --bench SAMPLES.tsv is make bench's final step: SAMPLES is the
file every bench script appended its samples to (BENCH_TABLE), whose first
line make wrote as "#start<TAB>date<TAB>load"; it prints the machine (CPU
model, vCPUs, memory, kernel), the date and the load at start and now, then
the one table of every cell.
"""
import os
import platform
import random
import statistics
import sys
import time
from collections import defaultdict


def paired_ratios(a, b):
    """Per-round ratios median(a[r]) / median(b[r]) for the rounds both
    sides have; a and b map a round to its list of samples."""
    return [statistics.median(a[r]) / statistics.median(b[r])
            for r in sorted(a) if a.get(r) and b.get(r)]


def interval(ratios, n=2000, low_rounds=4):
    """90% bootstrap interval (lo, hi) of the median of ratios, resampling
    rounds with a fixed seed (the table is reproducible from its samples);
    None below low_rounds rounds, where it would mean nothing."""
    if len(ratios) < low_rounds:
        return None
    rng = random.Random(1)
    ms = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(n))
    return ms[n // 20], ms[n - 1 - n // 20]


def fmt_interval(iv, digits=2):
    return f"[{iv[0]:.{digits}f}-{iv[1]:.{digits}f}]" if iv else "-"


def fmt_rate(x):
    return f"{x:.3g}" if x < 1000 else f"{x:.0f}"


def table(path, title=""):
    cells, sides, units, skipped = [], defaultdict(list), {}, {}
    s = defaultdict(lambda: defaultdict(list))  # (cell, side) -> round -> samples
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        f = line.rstrip("\n").split("\t")
        if len(f) >= 2 and f[0] not in cells:
            cells.append(f[0])
        if f[1] == "skip":
            skipped[f[0]] = f[2]
            continue
        cell, side, r, v, unit = f
        if side not in sides[cell]:
            sides[cell].append(side)
        units[cell] = unit
        s[cell, side][int(r)].append(float(v))
    if title:
        print(title)
    head = f"{'cell':<26} {'peer':<18} {'unit':<8} {'prism':>9} {'peer':>9} {'prism÷peer':>10} {'90% CI':<11}  per round"
    print(head)
    print("-" * len(head))
    for cell in cells:
        if cell in skipped:
            print(f"{cell:<26} {'-':<18} {'-':<8} {'not run: ' + skipped[cell]}")
            continue
        p = s[cell, "prism"]
        if sides[cell] == ["prism"]:
            pm = statistics.median(v for vs in p.values() for v in vs)
            print(f"{cell:<26} {'(no peer)':<18} {units[cell]:<8} {fmt_rate(pm):>9} {'-':>9} {'-':>10} {'-':<11}")
            continue
        for peer in sides[cell]:
            if peer == "prism":
                continue
            q = s[cell, peer]
            ratios = paired_ratios(p, q)
            if not ratios:
                continue
            pm = statistics.median(v for vs in p.values() for v in vs)
            qm = statistics.median(v for vs in q.values() for v in vs)
            print(f"{cell:<26} {peer:<18} {units[cell]:<8} {fmt_rate(pm):>9} {fmt_rate(qm):>9} "
                  f"{statistics.median(ratios):>10.2f} {fmt_interval(interval(ratios)):<11}  "
                  + " ".join(f"{x:.2f}" for x in ratios))


def machine():
    """CPU model, vCPUs, memory and kernel of this machine, in one line."""
    model = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal:"))
        mem = f"{mem / 2**20:.1f} GiB"
    except (OSError, StopIteration):
        mem = "?"
    return f"{model}, {os.cpu_count()} vCPUs, {mem} memory, kernel {platform.release()}"


def bench(path):
    start = next((l.rstrip("\n").split("\t") for l in open(path) if l.startswith("#start\t")), None)
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    print("prism make bench: every cell, prism against its peer, side by side on this machine")
    print(f"machine: {machine()}")
    if start:
        print(f"date: {start[1]} to {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
        print(f"load average (1, 5, 15 min): {start[2]} at start, {load} at end")
    else:
        print(f"date: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, load {load}")
    print("rates: median of all measured samples; prism÷peer: median over rounds of the in-round ratio")
    print("of medians (above 1 prism is faster), 90% bootstrap interval over rounds (4 or more rounds)")
    print()
    table(path)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--bench"]:
        bench(sys.argv[2])
    else:
        table(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
