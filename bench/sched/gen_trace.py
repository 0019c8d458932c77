#!/usr/bin/env python3
"""Synthetic GPU-cluster scheduling traces for `kiln sched-sim`.

  bench/sched/gen_trace.py --out-dir DIR [--nodes 1500] [--jobs 8000] [--load 1.0] [--seed 1]
                           [--cpu-only]

Writes DIR/nodes.csv, DIR/jobs.csv and DIR/queues.csv and prints one summary line (nodes, GPUs,
CPUs, jobs, span of the submissions, offered load). The same flags give the same files byte for
byte: one random.Random(seed) drives everything.

Cluster: 60% A100 nodes (8 GPUs), 30% H100 (8), 10% V100 (4); --cpu-only: 60% 64-CPU and 40%
128-CPU nodes. 16 nodes a switch, 4 switches a rack; each model fills racks of its own, as a
cluster bought in batches is cabled. domain is rack/switch ("r2/s5"), switches numbered across
the cluster so that a switch name alone is unique.

Jobs: 55% 1 GPU, 15% 2-4 GPUs, 18% one 8-GPU node, 12% gangs of 2..32 8-GPU nodes (powers of two
likelier: that is how people size data-parallel runs). gpu_model is "" (any node) only when every
node could host the job; otherwise an explicit list ("A100|H100"). Every job fits the idle
cluster: nodes, CPUs and memory are capped by the smallest node of the model set it names.
--cpu-only: 88% single-node jobs of 1..64 CPUs, 12% gangs of 16-64 CPUs per node.

Why these distributions:
  - durations lognormal (median 15 min, sigma 1.5, clipped to [30 s, 3 days]), the median growing
    as size^0.2: production traces (Philly, Helios, Alibaba PAI) show run times spread over orders
    of magnitude with a heavy right tail, and larger jobs running somewhat longer;
  - time limits = duration * U(1.1, 4) rounded up to 15 min, capped at 7 days: users overestimate,
    in round numbers; 5% get a limit below their duration (killed at the limit), as in real logs;
  - arrivals: a Poisson process whose rate follows a day/night cosine (peak at 14:00, trough at
    02:00, the trace starting at 09:00), plus hyper-parameter sweeps: 20% of the jobs come in
    bursts of 20-200 jobs with one shape, queue and priority, submitted within 1-10 minutes;
  - the span of the submissions makes the offered load (the work to serve, sum of
    gpus * min(duration, time_limit), CPUs with --cpu-only, over capacity * span) equal --load.
Queues team-a..d submit 40/30/20/10% of the jobs, have weights 4/3/2/1, GPU quotas in proportion
(summing to the cluster's GPUs; CPUs with --cpu-only) and may borrow half the cluster's, all in
cohort "main". Nodes and the other resource have no quota: jobs share nodes, and counting a 1-GPU
job as a whole node would make the node quota, not the GPUs, the limit. Priority 0 (87% of
the jobs), 10 (10%), 100 (3%). Exit status: 0; 2 on bad flags.
"""
import argparse
import math
import os
import random

# (name, share of nodes, gpus, cpus, memory_mib)
GPU_NODES = [("A100", 0.6, 8, 96, 1024000), ("H100", 0.3, 8, 112, 2048000),
             ("V100", 0.1, 4, 48, 384000)]
CPU_NODES = [("c64", 0.6, 0, 64, 256000), ("c128", 0.4, 0, 128, 512000)]
NODES_PER_SWITCH, SWITCHES_PER_RACK = 16, 4
QUEUES = {"team-a": 4, "team-b": 3, "team-c": 2, "team-d": 1}  # weight = share of the jobs
PRIORITIES = {0: 87, 10: 10, 100: 3}
MIX_GPU = {"one": 0.55, "few": 0.15, "eight": 0.18, "multi": 0.12}
MIX_CPU = {"single": 0.88, "multi": 0.12}
SWEEP_SHARE = 0.2
DAY, MINUTE, START_OF_DAY, PEAK = 86400, 60, 9 * 3600, 14 * 3600
DAY_AMPLITUDE = 0.6  # night rate = 1/4 of the afternoon's: (1 - 0.6) / (1 + 0.6)


def pick(rng, weighted):
    keys = list(weighted)
    return rng.choices(keys, weights=[weighted[k] for k in keys])[0]


def make_nodes(n, cpu_only):
    kinds = CPU_NODES if cpu_only else GPU_NODES
    counts = [int(round(share * n)) for _, share, *_ in kinds[:-1]]
    counts.append(max(0, n - sum(counts)))
    rows, info, rack = [], {}, 0
    for (model, _, gpus, cpus, mem), count in zip(kinds, counts):
        if count == 0:
            continue
        info[model] = (count, gpus, cpus, mem)
        for k in range(count):
            r = rack + k // (NODES_PER_SWITCH * SWITCHES_PER_RACK)
            s = r * SWITCHES_PER_RACK + (k // NODES_PER_SWITCH) % SWITCHES_PER_RACK
            rows.append([f"n{len(rows) + 1:05d}", cpus, mem, gpus, "" if cpu_only else model,
                         f"r{r + 1}/s{s + 1}"])
        # The next batch was bought later and racked apart.
        rack += -(-count // (NODES_PER_SWITCH * SWITCHES_PER_RACK))
    return rows, info


def model_set(info, spec):
    """(nodes, min gpus, min cpus, min memory) over the nodes a gpu_model value allows."""
    members = [info[m] for m in (spec.split("|") if spec else info)]
    return (sum(m[0] for m in members), *(min(m[i] for m in members) for i in (1, 2, 3)))


def gang_size(rng):
    return (pick(rng, {2: 35, 4: 30, 8: 20, 16: 10, 32: 5}) if rng.random() < 0.75
            else rng.randint(3, 31))


def gpu_shape(rng, cat, info):
    g = {"one": 1, "few": None, "eight": 8, "multi": 8}[cat] or pick(rng, {2: 45, 3: 10, 4: 45})
    nodes = gang_size(rng) if cat == "multi" else 1
    if g <= 4:
        sets = {"": 45, "A100": 20, "H100": 15, "A100|H100": 10, "V100": 10}
    else:  # no V100 node has 8 GPUs, so "" would admit nodes that cannot host it
        sets = {"A100": 45, "H100": 30, "A100|H100": 25}
    model = pick(rng, {s: w for s, w in sets.items()
                       if all(m in info for m in s.split("|") if m) and model_set(info, s)[1] >= g})
    count, _, cpu_cap, mem_cap = model_set(info, model)
    cpus = min(int(round(g * rng.uniform(8, 12))), cpu_cap)
    mem = min(g * rng.randint(64, 128) * 1000, mem_cap)
    return min(nodes, count), cpus, mem, g, model


def cpu_shape(rng, cat, info):
    count, _, cpu_cap, mem_cap = model_set(info, "")
    if cat == "single":  # mostly powers of two (people ask for 4 or 16 CPUs), sometimes any
        nodes, cpus = 1, (rng.randint(1, 64) if rng.random() < 0.2
                          else pick(rng, {1: 25, 2: 20, 4: 18, 8: 14, 16: 10, 32: 8, 64: 5}))
    else:
        nodes, cpus = gang_size(rng), rng.choice([16, 32, 64])
    cpus = min(cpus, cpu_cap)
    return min(nodes, count), cpus, min(cpus * rng.randint(2, 4) * 1000, mem_cap), 0, ""


def size_median(nodes, cpus, gpus):
    return 15 * MINUTE * max(1.0, nodes * (gpus if gpus else cpus / 8)) ** 0.2


def clip_duration(d):
    return int(round(min(max(d, 30), 3 * DAY)))


def time_limit(rng, d):
    """(duration, limit): the duration changes only for a killed job too short to be killed."""
    if rng.random() < 0.05:
        lim = d * rng.uniform(0.25, 0.9)
        step = 15 * MINUTE if lim >= 15 * MINUTE else MINUTE
        lim = max(MINUTE, int(lim // step) * step)
        if lim >= d:  # d <= 60 s: no whole minute below it, so it runs past a 1-minute limit
            d = lim + rng.randint(1, MINUTE)
        return d, lim
    return d, min(math.ceil(d * rng.uniform(1.1, 4) / (15 * MINUTE)) * 15 * MINUTE, 7 * DAY)


def day_time(rng, span):
    """A time in [0, span) drawn from the day/night rate, by thinning."""
    while True:
        t = rng.uniform(0, span)
        phase = 2 * math.pi * (t + START_OF_DAY - PEAK) / DAY
        if rng.random() * (1 + DAY_AMPLITUDE) < 1 + DAY_AMPLITUDE * math.cos(phase):
            return t


def make_jobs(rng, m, info, cpu_only, load):
    mix, shape = (MIX_CPU, cpu_shape) if cpu_only else (MIX_GPU, gpu_shape)
    sweeps, left = [], int(SWEEP_SHARE * m)
    while left >= 20:
        sweeps.append(min(rng.randint(20, 200), left))
        left -= sweeps[-1]
    # Sweeps are single-node jobs; background jobs make up for it so the overall mix holds.
    f = sum(sweeps) / m
    sweep_mix = {c: p / (1 - mix["multi"]) for c, p in mix.items() if c != "multi"}
    background_mix = {c: (p - f * sweep_mix.get(c, 0)) / (1 - f) for c, p in mix.items()}
    jobs, groups = [], []  # job: [t, nodes, cpus, mem, gpus, model, queue, prio, d, lim]
    for k in sweeps:
        nodes, cpus, mem, g, model = shape(rng, pick(rng, sweep_mix), info)
        q, prio = pick(rng, QUEUES), pick(rng, PRIORITIES)
        # One code with different hyper-parameters: similar run times. sigma 1.4 across sweeps
        # and 0.5 within one give the background's 1.5 overall (sqrt(1.4^2 + 0.5^2)).
        median = size_median(nodes, cpus, g) * rng.lognormvariate(0, 1.4)
        groups.append((len(jobs), k))
        for _ in range(k):
            d, lim = time_limit(rng, clip_duration(rng.lognormvariate(math.log(median), 0.5)))
            jobs.append([0.0, nodes, cpus, mem, g, model, q, prio, d, lim])
    for _ in range(m - len(jobs)):
        nodes, cpus, mem, g, model = shape(rng, pick(rng, background_mix), info)
        q, prio = pick(rng, QUEUES), pick(rng, PRIORITIES)
        d = clip_duration(rng.lognormvariate(math.log(size_median(nodes, cpus, g)), 1.5))
        jobs.append([0.0, nodes, cpus, mem, g, model, q, prio, *time_limit(rng, d)])
    capacity = sum(c * (gp if not cpu_only else cp) for c, gp, cp, _ in info.values())
    work = sum(j[1] * (j[2] if cpu_only else j[4]) * min(j[8], j[9]) for j in jobs)
    span = work / (capacity * load)
    for first, k in groups:
        t, window = day_time(rng, span), rng.uniform(1, 10) * MINUTE
        for job in jobs[first:first + k]:
            job[0] = t
            t += rng.expovariate(k / window)
    for job in jobs[sum(sweeps):]:
        job[0] = day_time(rng, span)
    # Stretch the times onto exactly [0, span]: the drawn ones fall a little short of both ends.
    lo, hi = min(j[0] for j in jobs), max(j[0] for j in jobs)
    for job in jobs:
        job[0] = int(round((job[0] - lo) * span / (hi - lo))) if hi > lo else 0
    jobs.sort(key=lambda j: j[0])  # stable: ties keep the sweep's order
    return jobs, capacity, work


def apportion(total, weights):
    """Integer shares of total in proportion to weights, summing to total (largest remainder)."""
    raw = [total * w / sum(weights) for w in weights]
    out = [int(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: (out[i] - raw[i], i))[:total - sum(out)]:
        out[i] += 1
    return out


def write_csv(out_dir, name, header, rows):
    with open(os.path.join(out_dir, name), "w", newline="") as f:
        f.write("".join(",".join(map(str, row)) + "\n" for row in [header.split(",")] + rows))


def positive(kind):
    def parse(text):
        value = kind(text)  # argparse turns a ValueError into "invalid int value: 'x'"
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"must be > 0: {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--nodes", type=positive(int), default=1500)
    ap.add_argument("--jobs", type=positive(int), default=8000)
    ap.add_argument("--load", type=positive(float), default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cpu-only", action="store_true")
    args = ap.parse_args()
    nodes, info = make_nodes(args.nodes, args.cpu_only)
    jobs, capacity, work = make_jobs(random.Random(args.seed), args.jobs, info, args.cpu_only,
                                     args.load)
    os.makedirs(args.out_dir, exist_ok=True)
    write_csv(args.out_dir, "nodes.csv", "name,cpus,memory_mib,gpus,gpu_model,domain", nodes)
    write_csv(args.out_dir, "jobs.csv",
              "name,submit_s,duration_s,time_limit_s,nodes,cpus_per_node,memory_mib_per_node,"
              "gpus_per_node,gpu_model,queue,priority",
              [[f"j{i + 1:06d}", t, d, lim, n, c, mem, g, model, q, p]
               for i, (t, n, c, mem, g, model, q, p, d, lim) in enumerate(jobs)])
    totals = [len(nodes), sum(r[1] for r in nodes), sum(r[3] for r in nodes)]
    limited = 1 if args.cpu_only else 2  # the one resource with a quota: CPUs or GPUs
    shares = apportion(totals[limited], list(QUEUES.values()))
    rows = []
    for i, (q, w) in enumerate(QUEUES.items()):
        quota, borrow = ["", "", ""], ["", "", ""]
        quota[limited] = shares[i]
        borrow[limited] = totals[limited] // 2
        rows.append([q, q.split("-", 1)[1], "main", w] + quota + borrow)
    write_csv(args.out_dir, "queues.csv",
              "name,team,cohort,weight,quota_nodes,quota_cpus,quota_gpus,"
              "borrow_nodes,borrow_cpus,borrow_gpus", rows)
    span = jobs[-1][0]
    load = f"{work / (capacity * span):.3f}" if span else "n/a"
    print(f"nodes={totals[0]} gpus={totals[2]} cpus={totals[1]} jobs={len(jobs)} span_s={span} "
          f"offered_load={load} ({'cpu' if args.cpu_only else 'gpu'}) out={args.out_dir}")


if __name__ == "__main__":
    main()
