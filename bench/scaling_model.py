#!/usr/bin/env python3
"""Weak-scaling model for hvtrain: predicts step time and efficiency at many ranks from a few
measured inputs, for a given network. See bench/SCALING.md for the derivation.

    step(p) = compute + exposed_comm(p)
    allreduce(bytes, p) = 2*ceil(log2 p)*alpha + 2*(p-1)/p * bytes / bw     (Rabenseifner)
    Buckets come from hvtrain's greedy fusion plan. Backward runs layer by layer (last first),
    each taking its share of the step's backward FLOPs; a bucket is ready when its last
    layer is done; buckets are reduced one after another on the communication thread.
    exposed_comm(p) = time the last reduction ends after backward ends (overlap on), or
                      the sum of all reductions (overlap off).
    efficiency(p) = step(1) / step(p)    (fixed batch per rank: weak scaling)

    Model check (this machine): step(p) = c(p) (1 + gamma) + exposed_comm(p), c(p) the 1-rank
    step x max(1, p/cores), alpha and bw fitted to raw MPI_Allreduce at p ranks, gamma (the
    slowdown of ranks sharing one machine) fitted to the measured p-rank steps; held-out
    errors are printed. Predictions at 8..4096 ranks assume one rank per node: gamma = 0.

Usage: scaling_model.py MEASURED.json [--bw GBs] [--latency us] [--gpu-tflops T] [--out PREFIX]
                        [--layouts-measured MODEL-PARALLEL.json]

Model-parallel layouts (D data × T tensor × P pipeline ranks, M micro-batches): `layout_step`.

Sharded state (distribution.shard, `step_time(..., shard=)`): "optimizer" keeps the all-reduce
and adds an all-gather of every bucket's updated pieces after the step, not overlapped;
"gradients" reduce-scatters each bucket instead (half an all-reduce's traffic, overlapped as
the all-reduce is) and adds the same all-gather; "parameters" reduce-scatters as "gradients"
does, gathers no whole model after the step, and instead gathers each layer just before it is
read: every layer in forward, then in backward the layers from the second-to-last down to the
second (the last is still held from forward; the first needs no input gradient). Without
prefetch (`distribution.prefetch = false`) every gather is exposed. With it (the default,
`prefetch=True`) the next layer's gather runs on its own thread while the current layer
computes, one at a time: only the first layer's gather, and whatever part of a gather outlasts
the layer computed beside it, is exposed; backward's second-to-last layer is still held in the
second window (no gather). The gathers' share of the links with the backward's reduce-scatter
is not modelled.
    reduce_scatter(bytes, p) = all_gather(bytes, p) = ceil(log2 p)*alpha + (p-1)/p * bytes / bw
"""
import argparse, json, math, statistics

RANKS = [1, 2, 4, 8, 64, 512, 4096]


def allreduce(nbytes, p, alpha, bw):
    if p == 1:
        return 0.0
    return 2 * math.ceil(math.log2(p)) * alpha + 2 * (p - 1) / p * nbytes / bw


def half(nbytes, p, alpha, bw):
    """A reduce-scatter or an all-gather of nbytes over p ranks: half an all-reduce."""
    if p == 1:
        return 0.0
    return math.ceil(math.log2(p)) * alpha + (p - 1) / p * nbytes / bw


def tensors(layers):
    """(bytes, layer) in backward order: last layer first, weight then bias (src/model)."""
    t = []
    for l in reversed(range(len(layers) - 1)):
        t += [(4 * layers[l] * layers[l + 1], l), (4 * layers[l + 1], l)]
    return t


def plan(ts, threshold):
    """hvtrain's greedy fusion plan (src/parallel/fusion.rs): lists of tensors per bucket."""
    buckets, used = [], 0
    for t in ts:
        if buckets and used > 0 and used + t[0] <= threshold:
            buckets[-1].append(t)
            used += t[0]
        else:
            buckets.append([t])
            used = t[0]
    return buckets


def flops(layers, batch):
    """(forward, per-layer backward) FLOPs of one step; layer 0 computes no input gradient."""
    fwd = sum(2 * layers[l] * layers[l + 1] * batch for l in range(len(layers) - 1))
    bwd = [2 * layers[l] * layers[l + 1] * batch * (1 if l == 0 else 2) for l in range(len(layers) - 1)]
    return fwd, bwd


def exposed_gathers(gathers, computes):
    """The main thread's wait for a sequence of layer gathers with prefetch: fetch k needs
    gather k (None: held, no gather), then computes computes[k]; gather k+1 starts on the
    gather thread when fetch k has its layer (one gather at a time)."""
    t, waited, thread_free = 0.0, 0.0, 0.0
    ready = None  # when the gather started ahead for the next fetch is done
    for k, g in enumerate(gathers):
        if g is not None:
            done = ready if ready is not None else max(t, thread_free) + g
            waited += max(0.0, done - t)
            t = max(t, done)
            thread_free = t
        ready = None
        nxt = next((x for x in gathers[k + 1:] if x is not None), None)
        if nxt is not None and gathers[k + 1] is not None:
            ready = max(t, thread_free) + nxt
            thread_free = ready
        t += computes[k]
    return waited


def step_time(model, p, alpha, bw, overlap, compute_s=None, shard="none", prefetch=True):
    """(step, communication total, exposed, buckets) in seconds; compute_s overrides the
    model's; shard: "none", "optimizer", "gradients" or "parameters" (see the module's doc);
    prefetch: "parameters"' gathers ahead on their own thread."""
    model = dict(model, compute_s=model["compute_s"] if compute_s is None else compute_s)
    layers, batch = model["layers"], model["batch_per_rank"]
    buckets = plan(tensors(layers), model["threshold_bytes"])
    reduce = half if shard in ("gradients", "parameters") else allreduce
    comm = [reduce(sum(t[0] for t in b), p, alpha, bw) for b in buckets]
    if shard == "parameters":
        # Each layer gathered before it is read: forward, then backward's layers n-2 .. 1.
        n = len(layers) - 1
        size = [4 * (layers[l] * layers[l + 1] + layers[l + 1]) for l in range(n)]
        order = list(range(n)) + list(range(n - 2, 0, -1))
        gather_all = sum(half(size[l], p, alpha, bw) for l in order)
        gather = gather_all
    elif shard != "none":
        # The updated pieces all-gathered after the step, bucket by bucket, nothing to hide them.
        gather = sum(half(sum(t[0] for t in b), p, alpha, bw) for b in buckets)
    else:
        gather = 0.0
    fwd, bwd = flops(layers, batch)
    per_flop = model["compute_s"] / (fwd + sum(bwd))
    # When each layer's backward ends, measured from the end of forward.
    done, t = {}, 0.0
    for l in reversed(range(len(layers) - 1)):
        t += bwd[l] * per_flop
        done[l] = t
    backward_end = t
    if shard == "parameters" and prefetch:
        # Forward: layer l's gather, then its product; backward (from the last layer down):
        # the last layer held from forward, the second-to-last held in the second window.
        fw = [(half(size[l], p, alpha, bw), 2 * layers[l] * layers[l + 1] * batch * per_flop) for l in range(n)]
        bw_seq = [(None if l >= n - 2 else half(size[l], p, alpha, bw), bwd[l] * per_flop)
                  for l in range(n - 1, 0, -1)]
        seq = fw + bw_seq
        gather = exposed_gathers([g for g, _ in seq], [c for _, c in seq])
        gather_all = sum(g for g, _ in seq if g is not None)
    if overlap:
        end = 0.0
        for b, c in zip(buckets, comm):
            ready = max(done[l] for _, l in b)
            end = max(end, ready) + c
        exposed = max(0.0, end - backward_end)
    else:
        exposed = sum(comm)
    total = sum(comm) + (gather_all if shard == "parameters" else gather)
    return model["compute_s"] + exposed + gather, total, exposed + gather, len(buckets)


def shard_lines(m, alpha, bw):
    """Predicted step of the large CPU model with each distribution.shard mode (overlap on)."""
    big = [x for x in models(m) if x["name"].startswith("large MLP")][0]
    lines = [f"## Sharded state (distribution.shard): {big['name']}, overlap on (predicted)", "",
             "The all-gather of the updated parameters after each step is exposed; \"gradients\" halves the "
             "overlapped traffic (reduce-scatter); \"parameters\" gathers each layer before forward and backward "
             "read it (about twice the parameters' bytes): with prefetch (the default) the next layer's gather runs "
             "beside this layer's product and only what outlasts it is exposed; without, all of it. The optimizer's "
             "own time, which sharding divides by the ranks, is not in the model.", "",
             "| ranks | none (ms) | optimizer (ms) | gradients (ms) | parameters (ms) | parameters, no prefetch (ms) | "
             "optimizer / none | gradients / none | parameters / none | no prefetch / none |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    modes = ("none", "optimizer", "gradients", "parameters")
    for p in RANKS:
        t = {s: step_time(big, p, alpha, bw, True, shard=s)[0] for s in modes}
        t["plain"] = step_time(big, p, alpha, bw, True, shard="parameters", prefetch=False)[0]
        lines.append(f"| {p} | {t['none']*1e3:.2f} | {t['optimizer']*1e3:.2f} | {t['gradients']*1e3:.2f} | "
                     f"{t['parameters']*1e3:.2f} | {t['plain']*1e3:.2f} | {t['none']/t['optimizer']:.2f}× | "
                     f"{t['none']/t['gradients']:.2f}× | {t['none']/t['parameters']:.2f}× | {t['none']/t['plain']:.2f}× |")
    return lines + [""]


def models(m, gpu_tflops=None):
    """The jobs to predict. Compute comes from measurements in m, except a GPU rank's, which is
    the --gpu-tflops parameter (no GPU was measured)."""
    fm = [784, 512, 512, 10]
    big = m["gemm_big"]["layers"]
    nparams = sum(big[i] * big[i + 1] + big[i + 1] for i in range(len(big) - 1))
    c1 = m["runs"]["1-64"]["step_ms"] / 1e3
    g = m["gemm_big"]
    big_cpu = g["flop_per_sample"] * g["batch"] / (g["gflops"] * 1e9)
    T = 64 << 20
    out = [
        {"name": "Fashion-MNIST 784-512-512-10, CPU rank", "layers": fm, "batch_per_rank": 128, "compute_s": c1,
         "compute_source": "measured: 1-rank step here", "threshold_bytes": T},
        {"name": "Fashion-MNIST, 1 MiB buckets", "layers": fm, "batch_per_rank": 128, "compute_s": c1,
         "compute_source": "measured: 1-rank step here", "threshold_bytes": 1 << 20},
        {"name": f"large MLP {'-'.join(map(str, big))} ({nparams/1e6:.0f}M params), CPU rank", "layers": big,
         "batch_per_rank": g["batch"], "compute_s": big_cpu,
         "compute_source": f"measured: the step's GEMMs at {g['gflops']:.0f} GFLOP/s (`hvtrain bench gemm`, one process; "
                           "GEMMs only, the rest of the step left out)", "threshold_bytes": T},
    ]
    if gpu_tflops:
        src = f"6 x params x batch at {gpu_tflops:g} TFLOP/s: a parameter given with --gpu-tflops, not measured"
        for thr in (T, 16 << 20):
            out.append({"name": f"large MLP, GPU rank at {gpu_tflops:g} TFLOP/s (parameter), {thr >> 20} MiB buckets",
                        "layers": big, "batch_per_rank": 4096, "compute_s": 6 * nparams * 4096 / (gpu_tflops * 1e12),
                        "compute_source": src, "threshold_bytes": thr})
    return out


def _fit_gamma(pts):
    """Least squares, on relative error, of the one calibrated term: measured = c(p) (1 + gamma) + exposed."""
    a = [pt["compute_ms"] / pt["measured_ms"] for pt in pts]
    b = [(pt["measured_ms"] - pt["compute_ms"] - pt["exposed_pred_ms"]) / pt["measured_ms"] for pt in pts]
    return sum(x * y for x, y in zip(a, b)) / sum(x * x for x in a)


def check(m):
    """Predicted vs measured step at each measured p > 1 on this machine (overlap on, the runs'
    setting). step(p) = c(p) (1 + gamma) + exposed(p), where c(p) = 1-rank step x max(1, p/cores)
    (time-sharing the cores), exposed(p) is the overlap replay with alpha, bw fitted to raw
    MPI_Allreduce at p ranks, and gamma, the slowdown of ranks sharing one machine (caches,
    memory, communication threads), is the one term fitted to these steps. Returns the points
    with gamma fitted on all of them, the held-out error of each point (gamma fitted on the
    others), and the error at 4 ranks with gamma fitted at 2 ranks only."""
    fm = models(m)[0]
    cores = m.get("vcpus", 2)
    c1 = m["runs"]["1-64"]["step_ms"]
    pts = []
    for r in m["runs"].values():
        p = r["ranks"]
        if p == 1:
            continue
        f = m["allreduce_fit"][str(p)]
        _, _, exposed, nb = step_time(dict(fm, threshold_bytes=r["fusion_mb"] << 20), p, f["alpha_us"] * 1e-6,
                                      f["bw_GBs"] * 1e9, overlap=True)
        pts.append({"ranks": p, "fusion_mb": r["fusion_mb"], "buckets": nb, "compute_ms": c1 * max(1.0, p / cores),
                    "exposed_pred_ms": exposed * 1e3, "exposed_meas_ms": r["exposed_ms"], "measured_ms": r["step_ms"]})
    pred = lambda pt, g: pt["compute_ms"] * (1 + g) + pt["exposed_pred_ms"]
    gamma = _fit_gamma(pts)
    for i, pt in enumerate(pts):
        pt["predicted_ms"] = pred(pt, gamma)
        pt["error"] = pt["predicted_ms"] / pt["measured_ms"] - 1
        others = pts[:i] + pts[i + 1:]
        pt["held_out_error"] = pred(pt, _fit_gamma(others)) / pt["measured_ms"] - 1 if others else float("nan")
    two = [pt for pt in pts if pt["ranks"] == 2]
    g2 = _fit_gamma(two) if two else float("nan")
    for pt in pts:
        pt["error_fit_at_2"] = pred(pt, g2) / pt["measured_ms"] - 1
    return {"gamma": gamma, "gamma_at_2": g2, "cores": cores, "points": pts}


def check_lines(m):
    c = check(m)
    rows = c["points"]
    L = ["## Model check on this machine", "",
         f"Predicted step = c(p) x (1 + gamma) + modelled exposed all-reduce, where c(p) = the 1-rank step x "
         f"max(1, p / {c['cores']} cores) and the all-reduce uses alpha, beta fitted to raw MPI_Allreduce at p ranks. "
         f"gamma, the slowdown of ranks sharing this machine, is the one term fitted to the steps below: "
         f"gamma = {c['gamma']:.3f} fitted on all of them, {c['gamma_at_2']:.3f} fitted on the 2-rank points alone. "
         "Held-out error: gamma fitted on the other points, then this one predicted.", "",
         "| ranks | fusion | buckets | c(p) (ms) | exposed predicted (ms) | exposed measured (ms) | "
         "predicted step (ms) | measured step (ms) | error | held-out error | error, gamma fitted at 2 ranks |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['ranks']} | {'%d MiB' % r['fusion_mb'] if r['fusion_mb'] else 'off'} | {r['buckets']} | "
                 f"{r['compute_ms']:.2f} | {r['exposed_pred_ms']:.3f} | {r['exposed_meas_ms']:.3f} | "
                 f"{r['predicted_ms']:.2f} | {r['measured_ms']:.2f} | {r['error']*100:+.1f} % | "
                 f"{r['held_out_error']*100:+.1f} % | {r['error_fit_at_2']*100:+.1f} % |")
    e = max(abs(r["error"]) for r in rows)
    h = max(abs(r["held_out_error"]) for r in rows)
    f4 = [abs(r["error_fit_at_2"]) for r in rows if r["ranks"] > 2]
    ex = [r["exposed_meas_ms"] / r["exposed_pred_ms"] for r in rows if r["exposed_pred_ms"] > 0]
    L += ["", f"- step: largest error {e*100:.1f} % with gamma fitted on all {len(rows)} points; largest held-out "
          f"error {h*100:.1f} %" + (f"; 4 ranks predicted from a gamma fitted at 2 ranks: within {max(f4)*100:.1f} %" if f4 else ""),
          f"- exposed communication alone: measured / predicted = {min(ex):.1f}x to {max(ex):.1f}x. The step fits "
          "because compute dominates it here; the communication term, which is what grows at scale, is the least "
          "tested part of the model.", ""]
    return L


# ---- Model-parallel layouts (issue #11): data D × tensor T × pipeline P ranks, M micro-batches.
LAYOUTS = [(4, 1, 1, 1), (2, 2, 1, 1), (1, 4, 1, 1), (2, 1, 2, 1), (2, 1, 2, 4), (1, 2, 2, 1), (1, 2, 2, 4),
           (1, 1, 4, 1), (1, 1, 4, 4)]


def layout_step(layers, gbatch, d, t, p, mb, rate, alpha_t, bw_t, alpha_d, bw_d):
    """One step of layout (D, T, P, M) at global batch `gbatch`, each rank computing at `rate`
    FLOP/s, the tensor group's network (alpha_t, bw_t), the data group's (alpha_d, bw_d).
    Compute splits ideally over T·P ranks except a last layer without a partner, which every
    tensor rank computes whole; a pipeline stage idles (P-1)/(M+P-1) of the step (GPipe);
    each layer pair costs one all-reduce of its output forward and of its input gradient
    backward, per micro-batch, over T ranks; each stage boundary sends activations forward and
    gradients back per micro-batch; gradients (1/(T·P) of them) are all-reduced over D ranks
    after backward (no overlap). Returns a dict of seconds and per-rank bytes."""
    b = gbatch / d
    fwd, bwd = flops(layers, b)
    per_layer = [2 * layers[l] * layers[l + 1] * b + bwd[l] for l in range(len(layers) - 1)]
    pairs = (len(layers) - 1) // 2
    split = sum(per_layer[:2 * pairs]) / t + sum(per_layer[2 * pairs:])
    compute = split / p / rate
    bubble = (p - 1) / (mb + p - 1)
    tp = 0.0
    if t > 1:
        for i in range(pairs):
            for width in (layers[2 * i + 2], layers[2 * i]):
                tp += mb * allreduce(4 * b / mb * width, t, alpha_t, bw_t)
        tp /= p
    pp = 2 * (mb + p - 2) * (alpha_t + 4 * b / mb * max(layers[1:-1]) / bw_t) if p > 1 else 0.0
    nparams = sum(layers[i] * layers[i + 1] + layers[i + 1] for i in range(len(layers) - 1))
    dp = allreduce(4 * nparams / (t * p), d, alpha_d, bw_d)
    step = (compute + tp) / (1 - bubble) + pp + dp
    return {"step": step, "samples_per_s": gbatch / step, "compute": compute, "tp": tp, "pp": pp, "dp": dp,
            "bubble": bubble, "params_bytes": 4 * nparams / (t * p)}


def layout_lines(m, alpha, bw, measured=None):
    """The layouts of 4 ranks for the wide MLP and the Fashion-MNIST one: here (alpha, beta fitted
    at 2 and 4 ranks, compute at the measured GEMM rate shared by 4 ranks on the machine's cores)
    and on the named network (one rank per node: the GEMM rate per rank). `measured`: the
    model-parallel benchmark's JSON ({model: {"D,T,P,M": samples/s}}), shown beside."""
    g = m["gemm_big"]
    cores = m.get("vcpus", 2)
    f2, f4 = m["allreduce_fit"]["2"], m["allreduce_fit"]["4"]
    fit = lambda f: (f["alpha_us"] * 1e-6, f["bw_GBs"] * 1e9)
    jobs = {"wide": ([784, 8192, 8192, 8192, 10], 32), "fmnist": ([784, 512, 512, 10], 512)}
    L = ["## Model-parallel layouts on 4 ranks (predicted)", "",
         "Data D × tensor T × pipeline P = 4 ranks, M micro-batches, at a fixed global batch (the model-parallel "
         "benchmark's: 32 for the wide MLP, 512 for Fashion-MNIST). 'here': 4 ranks time-sharing this machine's "
         f"{cores} cores at the measured GEMM rate ({g['gflops']:.0f} GFLOP/s per process), all-reduces with alpha, "
         "beta fitted at 2 ranks (tensor groups of 2) and 4 ranks; 'network': one rank per node on the named network. "
         "Layouts with more stages than dense layers are left out (hvtrain refuses them). See bench/SCALING.md.", "",
         "| model | D,T,P | M | state/rank (MiB, params+grads) | bubble | TP all-reduce (ms) | DP all-reduce (ms) | "
         "samples/s here | measured here | samples/s network |", "|---|---|---|---|---|---|---|---|---|---|"]
    curves = {}
    for name, (layers, gb) in jobs.items():
        for (d, t, p, mb) in LAYOUTS:
            if p > len(layers) - 1:
                continue
            here_rate = g["gflops"] * 1e9 * min(1.0, cores / 4)
            at = fit(f2) if t == 2 else fit(f4)
            ad = fit(f2) if d == 2 else fit(f4)
            h = layout_step(layers, gb, d, t, p, mb, here_rate, *at, *ad)
            n = layout_step(layers, gb, d, t, p, mb, g["gflops"] * 1e9, alpha, bw, alpha, bw)
            meas = (measured or {}).get(name, {}).get(f"{d},{t},{p},{mb}")
            curves.setdefault(name, []).append((f"{d},{t},{p} M{mb}", h["samples_per_s"], meas, n["samples_per_s"]))
            L.append(f"| {'-'.join(map(str, layers))} | {d},{t},{p} | {mb} | {3 * h['params_bytes'] / 2**20:,.1f} | "
                     f"{h['bubble']:.2f} | {h['tp'] * 1e3:.2f} | {h['dp'] * 1e3:.2f} | {h['samples_per_s']:,.1f} | "
                     f"{f'{meas:,.1f}' if meas else '–'} | {n['samples_per_s']:,.1f} |")
    return L + [""], curves


# ---- Two-level networks (issue #30 item 5): N nodes x L ranks, flat against hierarchical.

def _levels(n, nodes, per_node, cyclic):
    """Rabenseifner's levels on N x L ranks: (inside the node?, bytes each rank sends) per level of
    the reduce-scatter (the all-gather mirrors it). Level k pairs ranks 2^k apart; block placement
    (mpirun's default, ranks node by node) keeps distances below L inside a node, cyclic
    (--map-by node) puts distances below N across nodes."""
    p = nodes * per_node
    out = []
    for k in range(int(math.log2(p))):
        d = 1 << k
        inside = (d >= nodes and d % nodes == 0) if cyclic else d < per_node
        out.append((inside, n / (2 << k)))
    return out


def flat_two_level(n, nodes, per_node, intra, inter, cyclic=False):
    """Flat all-reduce of n bytes on N x L ranks: each level costs alpha + bytes / bw of its kind;
    a level that crosses nodes has all L ranks of a node sending through its one link at once
    (bytes x L over the node's bandwidth)."""
    t = 0.0
    for inside, b in _levels(n, nodes, per_node, cyclic):
        (a, bw), share = (intra, 1) if inside else (inter, per_node)
        t += 2 * (a + share * b / bw)
    return t


def hierarchical_two_level(n, nodes, per_node, intra, inter):
    """hvtrain's distribution.hierarchical: MPI_Reduce in the node (reduce-scatter + gather, the
    cost of an all-reduce there), MPI_Allreduce among the N leaders (one per node), MPI_Bcast in
    the node (scatter + all-gather, the same again)."""
    return 2 * allreduce(n, per_node, *intra) + allreduce(n, nodes, *inter)


def _solve(a, b):
    """Least squares a x = b by the normal equations (a few unknowns; no numpy here)."""
    k = len(a[0])
    m = [[sum(r[i] * r[j] for r in a) for j in range(k)] + [sum(r[i] * y for r, y in zip(a, b))] for i in range(k)]
    for c in range(k):
        piv = max(range(c, k), key=lambda r: abs(m[r][c]))
        m[c], m[piv] = m[piv], m[c]
        if abs(m[c][c]) < 1e-300:
            return [0.0] * k
        for r in range(k):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][k] / m[i][i] for i in range(k)]


def _solve_nonneg(a, b):
    """`_solve` with every unknown kept at 0 or above: a negative one is fixed at 0 and the rest
    refitted (an active set, enough for four unknowns)."""
    free = list(range(len(a[0])))
    while True:
        x = _solve([[r[i] for i in free] for r in a], b) if free else []
        neg = [f for f, v in zip(free, x) if v < 0]
        if not neg:
            out = [0.0] * len(a[0])
            for f, v in zip(free, x):
                out[f] = v
            return out
        free.remove(neg[0])


def parse_hierarchical(path):
    """bench/hierarchical.sh's report: {link: {per_node: [(bytes, flat_s, hier_s)]}}."""
    out, link, per_node = {}, None, None
    for line in open(path):
        if line.startswith("## "):
            link = line[3:].split(" (")[0]
            per_node = int(line.rsplit("x", 1)[1].split()[0])
        elif link and line.strip() and line.strip()[0].isdigit():
            f = line.split()
            out.setdefault(link, {}).setdefault(per_node, []).append((int(f[0]), float(f[1]) * 1e-6, float(f[3]) * 1e-6))
    return out


def hierarchical_lines(path, alpha, bw, intra_alpha, intra_bw, m=None):
    """Fit (alpha, bw) inside and between nodes to the flat all-reduces measured on each link
    (both layouts together; least squares weighted by 1/sqrt(time), so neither the smallest nor
    the largest messages alone decide; every figure kept non-negative), predict the hierarchical path's times from
    them, and state the error; then predict flat and hierarchical at 8 to 1,024 ranks on the
    named network."""
    meas = parse_hierarchical(path)
    L = ["## Flat against hierarchical all-reduce on two-level networks", "",
         f"Fitted to `{path}` (bench/hierarchical.sh): on each link, alpha and bandwidth inside a node and between "
         "nodes from the flat MPI_Allreduce times of both layouts (2 x 2, 2 x 4; least squares weighted by 1/sqrt(time), "
         "non-negative; inf: that term was fitted to 0, the link never limited these runs), "
         "then the hierarchical path predicted from the same four figures and compared with its measured times.", "",
         "| link | intra alpha (us) | intra GB/s | inter alpha (us) | inter GB/s | flat: largest error | "
         "hierarchical predicted: median error | largest error | hierarchical / flat, measured | predicted |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for link, layouts in meas.items():
        rows, ys = [], []
        for per_node, pts in layouts.items():
            for n, flat, _ in pts:
                lv = _levels(n, 2, per_node, False)
                r = [sum(2 for i, _ in lv if i), sum(2 * b for i, b in lv if i),
                     sum(2 for i, _ in lv if not i), sum(2 * per_node * b for i, b in lv if not i)]
                w = flat ** -0.5
                rows.append([x * w for x in r])
                ys.append(flat * w)
        ai, inv_bi, ae, inv_be = _solve_nonneg(rows, ys)
        # A bandwidth term fitted to 0 means this link never limited these runs: shown as inf.
        intra = (ai, 1 / inv_bi if inv_bi > 0 else math.inf)
        inter = (ae, 1 / inv_be if inv_be > 0 else math.inf)
        ef, eh, ratios = [], [], []
        for per_node, pts in layouts.items():
            for n, flat, hier in pts:
                pf = flat_two_level(n, 2, per_node, intra, inter)
                ph = hierarchical_two_level(n, 2, per_node, intra, inter)
                ef.append(abs(pf / flat - 1))
                eh.append(abs(ph / hier - 1))
                if n == 4 << 20:
                    ratios.append((per_node, flat / hier, pf / ph))
        eh_sorted = sorted(eh)
        rm = ", ".join(f"2x{k}: {m:.2f}" for k, m, _ in ratios)
        rp = ", ".join(f"2x{k}: {p:.2f}" for k, _, p in ratios)
        L.append(f"| {link} | {intra[0]*1e6:.1f} | {intra[1]/1e9:.2f} | {inter[0]*1e6:.1f} | {inter[1]/1e9:.3f} | "
                 f"{max(ef)*100:.0f} % | {eh_sorted[len(eh)//2]*100:.0f} % | {max(eh)*100:.0f} % | {rm} (4 MiB) | {rp} |")
    L += ["", "Above 1 the hierarchical path is faster. The model has no term for what the measurement shows beside "
          "the network: 4 or 8 ranks sharing 2 cores, and Open MPI changing algorithm with the message size; the "
          "errors say how much that matters.", "",
          f"### Predicted at {bw/1e9:g} GB/s, {alpha*1e6:g} us between nodes, {intra_bw/1e9:g} GB/s, "
          f"{intra_alpha*1e6:g} us inside (parameters, not measured)", "",
          "All-reduce of the gradients of one step (one bucket), 8 ranks per node; flat with ranks placed node by "
          "node (block, mpirun's default) and round-robin over nodes (cyclic). samples/s: every rank's batch over "
          "(the measured 1-rank compute + the all-reduce, no overlap), for Fashion-MNIST's job (batch 128 per rank, "
          "compute measured here); '-' where no compute was measured.", "",
          "| model | ranks | flat, block (ms) | flat, cyclic (ms) | hierarchical (ms) | hierarchical / flat block | "
          "hierarchical / flat cyclic | samples/s flat block | cyclic | hierarchical |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    intra, inter = (intra_alpha, intra_bw), (alpha, bw)
    compute = m["runs"]["1-64"]["step_ms"] / 1e3 if m else None
    for name, layers in (("784-512-512-10", [784, 512, 512, 10]), ("784-4096x3-10", [784, 4096, 4096, 4096, 10])):
        n = sum(t[0] for t in tensors(layers))
        for p in (8, 16, 64, 256, 1024):
            nodes = p // 8
            fb = flat_two_level(n, nodes, 8, intra, inter)
            fc = flat_two_level(n, nodes, 8, intra, inter, cyclic=True)
            h = hierarchical_two_level(n, nodes, 8, intra, inter)
            if compute and layers[1] == 512:
                rate = lambda t: f"{p * 128 / (compute + t):,.0f}"
                sps = f"{rate(fb)} | {rate(fc)} | {rate(h)}"
            else:
                sps = "– | – | –"
            L.append(f"| {name} | {p} | {fb*1e3:.3f} | {fc*1e3:.3f} | {h*1e3:.3f} | {fb/h:.2f} | {fc/h:.2f} | {sps} |")
    L += ["", "In this model hierarchical never beats a flat all-reduce on block placement: the bytes each node sends "
          "are the same, and it adds the in-node reduce and broadcast. It wins, by the factor in the last column, "
          "when ranks are placed round-robin (or the flat algorithm is not node-aware), since then every rank's "
          "early, largest exchanges cross nodes through a link the node's ranks share.", ""]
    return L


def plot_layouts(curves, path):
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(curves), figsize=(12, 4.2))
    for ax, (name, rows) in zip(axes, curves.items()):
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [r[1] for r in rows], width=0.4, label="predicted, here")
        ax.bar([i + 0.2 for i in x], [r[3] for r in rows], width=0.4, label="predicted, network")
        mx = [(i, r[2]) for i, r in zip(x, rows) if r[2]]
        if mx:
            ax.plot([i for i, _ in mx], [v for _, v in mx], "k*", markersize=10, label="measured here")
        ax.set_xticks(list(x))
        ax.set_xticklabels([r[0] for r in rows], rotation=45, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("samples/s")
        ax.set_title({"wide": "784-8192-8192-8192-10 (141 M), batch 32", "fmnist": "784-512-512-10, batch 512"}[name])
        ax.grid(True, alpha=0.3, axis="y")
    axes[0].legend(fontsize=8)
    fig.suptitle("hvtrain: layouts of 4 ranks (D,T,P, M micro-batches)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("measured")
    ap.add_argument("--bw", type=float, default=25.0, help="network bandwidth per link, GB/s (default 25: InfiniBand HDR)")
    ap.add_argument("--latency", type=float, default=2.0, help="network latency, microseconds (default 2)")
    ap.add_argument("--gpu-tflops", type=float, default=None,
                    help="also predict a GPU rank computing at this many TFLOP/s (a parameter: no GPU is measured)")
    ap.add_argument("--out", default=None, help="prefix for the .md report and .png plots")
    ap.add_argument("--hierarchical-measured", default=None,
                    help="bench/hierarchical.sh's report: fit, check and predict flat against hierarchical all-reduce")
    ap.add_argument("--intra-bw", type=float, default=100.0, help="bandwidth inside a node, GB/s (default 100)")
    ap.add_argument("--intra-latency", type=float, default=0.5, help="latency inside a node, us (default 0.5)")
    ap.add_argument("--layouts-measured", default=None,
                    help="bench/model_parallel.sh's JSON: measured samples/s of each layout, beside the predicted ones")
    a = ap.parse_args()
    m = json.load(open(a.measured))
    alpha, bw = a.latency * 1e-6, a.bw * 1e9
    lines = check_lines(m)
    measured = json.load(open(a.layouts_measured)) if a.layouts_measured else None
    more, layout_curves = layout_lines(m, alpha, bw, measured)
    lines += [f"## Predicted weak scaling at {a.bw:g} GB/s, {a.latency:g} us (extrapolated)", "",
              "Compute per rank is held at its measured 1-rank value (each rank on its own cores); the network is "
              "the one named on the command line, not measured. See bench/SCALING.md for how far to trust these rows.", ""]
    curves = {}
    for model in models(m, a.gpu_tflops):
        for overlap in (False, True):
            name = f'{model["name"]} ({"overlap" if overlap else "no overlap"})'
            base = step_time(model, 1, alpha, bw, overlap)[0]
            rows = []
            for p in RANKS:
                t, comm, exposed, nb = step_time(model, p, alpha, bw, overlap)
                rows.append((p, t, comm, exposed, base / t))
            curves[name] = rows
            lines += [f"### {name}", "",
                      f'compute {model["compute_s"]*1e3:.2f} ms/step ({model["compute_source"]}), '
                      f'{step_time(model, 1, alpha, bw, overlap)[3]} bucket(s) at {model["threshold_bytes"]/2**20:g} MiB, '
                      f'{sum(t[0] for t in tensors(model["layers"]))/2**20:.1f} MiB of gradients, '
                      f'batch {model["batch_per_rank"]}/rank', "",
                      "| ranks | step (ms) | all-reduce (ms) | exposed (ms) | efficiency | samples/s (all ranks) |",
                      "|---|---|---|---|---|---|"]
            for p, t, comm, exposed, eff in rows:
                lines.append(f"| {p} | {t*1e3:.2f} | {comm*1e3:.3f} | {exposed*1e3:.3f} | {eff*100:.1f}% | {p*model['batch_per_rank']/t:,.0f} |")
            lines.append("")
    lines += shard_lines(m, alpha, bw)
    lines += more
    if a.hierarchical_measured:
        lines += hierarchical_lines(a.hierarchical_measured, alpha, bw, a.intra_latency * 1e-6, a.intra_bw * 1e9, m)
    text = "\n".join(lines)
    print(text)
    if a.out:
        open(a.out + ".md", "w").write(text + "\n")
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("(matplotlib missing: no plot; bench/scaling.sh sets up bench/.plotenv)")
            return
        fig, ax = plt.subplots(figsize=(11, 4.8))
        for name, rows in curves.items():
            ax.plot([r[0] for r in rows], [r[4] * 100 for r in rows], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks (one per GPU/node slot)")
        ax.set_ylabel("weak-scaling efficiency (%)")
        ax.set_ylim(0, 105)
        ax.set_title(f"hvtrain predicted weak scaling, {a.bw:g} GB/s, {a.latency:g} us")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
        fig.savefig(a.out + ".png", dpi=110)
        plot_layouts(layout_curves, a.out + "-layouts.png")
        print(f"wrote {a.out}.md, {a.out}.png and {a.out}-layouts.png")


if __name__ == "__main__":
    main()
