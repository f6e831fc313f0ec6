//! `hvtrain bench allreduce` (run it under mpirun): osu_allreduce-style timings of
//! (a) the raw `MPI_Allreduce` and (b) the engine's fused path on a realistic gradient set
//! of the same total size, from 4 KiB to 256 MiB. Prints algbw and busbw
//! (busbw = algbw × 2(n-1)/n, the figure NCCL and OSU report), one line per size.
//!
//! Must not: change the engine it measures (it builds one like training does) or run outside
//! `hvtrain bench`.

use crate::config::{BucketOrder, Compression, Reduction};
use crate::parallel::{reduce, Channel, Comm, Engine, FusionPlan};
use std::ops::Range;
use std::time::Instant;

/// Tensor sizes of an MLP-like gradient set totalling `total` floats: weight matrices of
/// decreasing size, each followed by a bias about a thousandth its size.
fn gradient_set(total: usize) -> Vec<usize> {
    let shares = [0.40, 0.25, 0.15, 0.10, 0.06, 0.04];
    let mut lens = Vec::new();
    let mut left = total;
    for (i, s) in shares.iter().enumerate() {
        let w = if i + 1 == shares.len() { left } else { ((total as f64 * s) as usize).min(left) };
        let b = (w / 1000).max(1).min(w);
        lens.extend([w - b, b].into_iter().filter(|&x| x > 0));
        left -= w;
    }
    lens.reverse(); // backward order: the last (smallest) layer first
    lens
}

fn time_it(comm: &Comm, budget_s: f64, mut f: impl FnMut()) -> f64 {
    f();
    f(); // warm-up
    comm.barrier();
    // Agree on an iteration count from rank 0's estimate, so every rank calls the same number.
    let t = Instant::now();
    f();
    let one = t.elapsed().as_secs_f64();
    let mut iters = [(budget_s / one.max(1e-7)).clamp(3.0, 2000.0)];
    comm.broadcast_f64(&mut iters);
    let iters = iters[0] as usize;
    comm.barrier();
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    let mine = t.elapsed().as_secs_f64() / iters as f64;
    comm.all_reduce_max_f64(mine)
}

/// Adasum written out in float64 over whole vectors, apart from `parallel/adasum.rs`: every
/// rank's vector (already × the rank count) combined tensor by tensor, the ranks above the
/// largest power of two p folded into ranks 0, 1, … first, then a binary tree (0+1, 2+3, …,
/// then (0+1)+(2+3), …), the lower rank's vector always `a`.
fn adasum_f64(ranks: &[Vec<f64>], tensors: &[Range<usize>]) -> Vec<f64> {
    let pair = |a: &[f64], b: &[f64]| -> Vec<f64> {
        let mut out = a.to_vec();
        for t in tensors {
            let (a, b) = (&a[t.clone()], &b[t.clone()]);
            let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            let (aa, bb): (f64, f64) = (a.iter().map(|x| x * x).sum(), b.iter().map(|y| y * y).sum());
            let ca = if aa >= 1e-8 { 1.0 - dot / (2.0 * aa) } else { 1.0 };
            let cb = if bb >= 1e-8 { 1.0 - dot / (2.0 * bb) } else { 1.0 };
            for (i, o) in out[t.clone()].iter_mut().enumerate() {
                *o = ca * a[i] + cb * b[i];
            }
        }
        out
    };
    let n = ranks.len();
    let p = (0..).map(|k| 1usize << k).take_while(|&q| q <= n).last().unwrap_or(1);
    let mut v: Vec<Vec<f64>> = ranks[..p].to_vec();
    for i in 0..n - p {
        v[i] = pair(&v[i], &ranks[p + i]);
    }
    let mut width = 1;
    while width < p {
        for g in (0..p).step_by(2 * width) {
            v[g] = pair(&v[g], &v[g + width]);
        }
        width *= 2;
    }
    v.swap_remove(0)
}

/// Every element of `got` against `want`; panics (which aborts the job) naming the path, the
/// size and the first wrong element.
/// Returns the largest error over the largest |want|.
fn check(what: &str, bytes: usize, got: &[f32], want: &[f32]) -> f64 {
    let wrong = got.iter().zip(want).position(|(g, w)| !((g - w).abs() <= 1e-4 + 1e-5 * w.abs()));
    if let Some(i) = wrong {
        panic!(
            "bench allreduce: the {what} all-reduce of {bytes} bytes gave a wrong sum: element {i} of {} is {}, expected {}",
            got.len(),
            got[i],
            want[i]
        );
    }
    let err = got.iter().zip(want).map(|(g, w)| f64::from((g - w).abs())).fold(0.0, f64::max);
    err / want.iter().map(|w| f64::from(w.abs())).fold(f64::MIN_POSITIVE, f64::max)
}

#[allow(clippy::too_many_arguments)]
pub fn run(
    comm: &Comm,
    min_bytes: usize,
    max_bytes: usize,
    threshold_mb: f64,
    budget_s: f64,
    reduction: Reduction,
    hierarchical: bool,
) {
    let n = comm.size as f64;
    let bus = 2.0 * (n - 1.0) / n;
    let adasum = reduction == Reduction::Adasum;
    if comm.rank == 0 {
        let what = match (adasum, hierarchical) {
            (true, _) => "raw: float32 sum, fused: Adasum (checked against float64)",
            (false, true) => "raw: float32 sum, fused: hierarchical sum (node, leaders, node)",
            _ => "float32 sum",
        };
        println!("# hvtrain bench allreduce: {} ranks, {what}, fusion threshold {threshold_mb} MiB", comm.size);
        println!("# busbw in GB/s; fused = the engine's path with overlap off (reduced on the calling thread);");
        println!("# threaded = with overlap on (handed to the communication thread and back)");
        println!(
            "# {:>10} {:>10} {:>9} {:>10} {:>9} {:>9} {:>11} {:>9} {:>9} {:>7} {:>7}",
            "bytes",
            "raw_us",
            "raw_bus",
            "fused_us",
            "fused_bus",
            "fused/raw",
            "thread_us",
            "thr_bus",
            "thr/raw",
            "tensors",
            "buckets"
        );
    }
    let chan = comm.channel();
    let mut bytes = min_bytes;
    let mut engine_chan = Some(comm.channel());
    // What rank r sends at element i; the expected sum is computed from it here, apart from
    // MPI and the engine, and every path writes into its own buffer, reset before it runs.
    let value = |i: usize, r: usize| {
        if adasum {
            // Directions that differ by rank, so Adasum's coefficients are neither 0.5 nor 1.
            ((i * 31 + r * r * 17 + r * 5) % 101) as f32 * 0.02 - 1.0 + 0.3 * r as f32
        } else {
            (i % 97) as f32 * 0.01 + r as f32
        }
    };
    while bytes <= max_bytes {
        let len = bytes / 4;
        let send: Vec<f32> = (0..len).map(|i| value(i, comm.rank)).collect();
        let expect: Vec<f32> = (0..len).map(|i| (0..comm.size).map(|r| value(i, r)).sum()).collect();
        let mut recv = vec![f32::NAN; len];
        let raw = time_it(comm, budget_s, || chan.all_reduce_sum_f32(&send, &mut recv));
        check("raw MPI_Allreduce", bytes, &recv, &expect);

        let lens = gradient_set(len);
        let thr = (threshold_mb * 1048576.0) as usize;
        let plan = FusionPlan::with_options(&lens, thr, thr, BucketOrder::Backward);
        let expect = if adasum {
            let ranks: Vec<Vec<f64>> =
                (0..comm.size).map(|r| (0..len).map(|i| f64::from(value(i, r)) * n).collect()).collect();
            adasum_f64(&ranks, &plan.slots).iter().map(|&x| x as f32).collect()
        } else {
            expect
        };
        let (tensors, buckets) = (lens.len(), plan.buckets.len());
        let mut fused_out = vec![f32::NAN; len];
        let mut timed = |overlap: bool, chan: Channel| {
            let reducer = reduce::for_job(Some(chan), Compression::None, reduction, hierarchical, &plan, false);
            let mut engine = Engine::new(reducer, plan.clone(), overlap, None, None, |n| vec![f32::NAN; n]);
            engine.load_grads(&send);
            let t = time_it(comm, budget_s, || engine.reduce_all());
            fused_out.fill(f32::NAN);
            engine.reduced_arena(&mut fused_out);
            let what = if overlap { "fused (threaded)" } else { "fused" };
            let err = check(what, bytes, &fused_out, &expect);
            if adasum && comm.rank == 0 {
                println!(
                    "# {what} Adasum of {bytes} bytes: largest error against float64 {err:.2e} of the largest element"
                );
            }
            (t, engine.into_channel().expect("a reducer with a channel"))
        };
        let (fused, c) = timed(false, engine_chan.take().unwrap());
        let (threaded, c) = timed(true, c);
        engine_chan = Some(c);

        if comm.rank == 0 {
            let gbs = |t: f64| bytes as f64 / t / 1e9 * bus;
            println!(
                "  {bytes:>10} {:>10.1} {:>9.3} {:>10.1} {:>9.3} {:>9.3} {:>11.1} {:>9.3} {:>9.3} {tensors:>7} {buckets:>7}",
                raw * 1e6,
                gbs(raw),
                fused * 1e6,
                gbs(fused),
                raw / fused,
                threaded * 1e6,
                gbs(threaded),
                raw / threaded
            );
        }
        bytes *= 4;
    }
}
