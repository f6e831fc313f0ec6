//! Single-threaded f32 GEMM benchmark of candidate crates on the exact shapes of one
//! hvtrain training step (784-512-512-10 MLP, per-rank batch 128, row-major X[batch,in],
//! W[in,out]).
//!
//! Usage:
//!   gemm-candidates check                 # correctness vs naive loop (NN, TN, NT, TT)
//!   gemm-candidates shapes [lib..]        # per-shape GFLOP/s (median), + whole step
//!   gemm-candidates rounds [lib..]        # same, 7 interleaved rounds, best/median
//!   gemm-candidates step <lib> <secs>     # whole-step loop for <secs> s (for 2-process runs)
//! lib = mm (matrixmultiply), gemm (gemm 0.19), faer (faer 0.24)

use std::hint::black_box;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Lay {
    /// A row-major [m,k], B row-major [k,n]
    NN,
    /// A = Xᵀ with X row-major [k,m]  (backward dW = Xᵀ·dY)
    TN,
    /// B = Wᵀ with W row-major [n,k]  (backward dX = dY·Wᵀ)
    NT,
    /// both transposed (correctness only)
    TT,
}

#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    m: usize,
    k: usize,
    n: usize,
    lay: Lay,
}

const STEP: [Shape; 8] = [
    Shape { name: "fwd L1 X·W", m: 128, k: 784, n: 512, lay: Lay::NN },
    Shape { name: "fwd L2 X·W", m: 128, k: 512, n: 512, lay: Lay::NN },
    Shape { name: "fwd L3 X·W", m: 128, k: 512, n: 10, lay: Lay::NN },
    Shape { name: "bwd L1 dW=Xᵀ·dY", m: 784, k: 128, n: 512, lay: Lay::TN },
    Shape { name: "bwd L2 dW=Xᵀ·dY", m: 512, k: 128, n: 512, lay: Lay::TN },
    Shape { name: "bwd L3 dW=Xᵀ·dY", m: 512, k: 128, n: 10, lay: Lay::TN },
    Shape { name: "bwd L2 dX=dY·Wᵀ", m: 128, k: 512, n: 512, lay: Lay::NT },
    Shape { name: "bwd L3 dX=dY·Wᵀ", m: 128, k: 10, n: 512, lay: Lay::NT },
];
const B256: [Shape; 2] = [
    Shape { name: "fwd L1 b256", m: 256, k: 784, n: 512, lay: Lay::NN },
    Shape { name: "fwd L2 b256", m: 256, k: 512, n: 512, lay: Lay::NN },
];

/// Row/column strides (in elements) of A [m,k] and B [k,n] for a layout, given that the
/// underlying buffers are dense row-major arrays of the *stored* matrix.
fn strides(s: &Shape) -> ((isize, isize), (isize, isize)) {
    let (m, k, n) = (s.m as isize, s.k as isize, s.n as isize);
    let a = match s.lay {
        Lay::NN | Lay::NT => (k, 1), // A stored [m,k]
        Lay::TN | Lay::TT => (1, m), // A = Xᵀ, X stored [k,m]
    };
    let b = match s.lay {
        Lay::NN | Lay::TN => (n, 1), // B stored [k,n]
        Lay::NT | Lay::TT => (1, k), // B = Wᵀ, W stored [n,k]
    };
    (a, b)
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Lib {
    Mm,
    Gemm,
    Faer,
}

impl Lib {
    fn parse(s: &str) -> Lib {
        match s {
            "mm" | "matrixmultiply" => Lib::Mm,
            "gemm" => Lib::Gemm,
            "faer" => Lib::Faer,
            _ => panic!("unknown lib {s}"),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Lib::Mm => "matrixmultiply 0.3.11",
            Lib::Gemm => "gemm 0.19.0",
            Lib::Faer => "faer 0.24.4",
        }
    }
}

/// C[m,n] (row-major, dense) = A·B, with A/B given by pointer + (row stride, col stride).
fn matmul(lib: Lib, s: &Shape, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (m, k, n) = (s.m, s.k, s.n);
    let ((rsa, csa), (rsb, csb)) = strides(s);
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    match lib {
        Lib::Mm => unsafe {
            // sgemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)
            // C = alpha·A·B + beta·C ; beta = 0 => C is not read (may hold garbage/NaN)
            matrixmultiply::sgemm(
                m, k, n, 1.0,
                a.as_ptr(), rsa, csa,
                b.as_ptr(), rsb, csb,
                0.0,
                c.as_mut_ptr(), n as isize, 1,
            );
        },
        Lib::Gemm => unsafe {
            // gemm(m, n, k, dst, dst_cs, dst_rs, read_dst, lhs, lhs_cs, lhs_rs,
            //      rhs, rhs_cs, rhs_rs, alpha, beta, conj_dst, conj_lhs, conj_rhs, par)
            // dst = alpha·dst + beta·lhs·rhs ; NOTE: column stride comes FIRST, and
            // alpha/beta roles are swapped w.r.t. BLAS. read_dst=false => dst not read.
            gemm::gemm(
                m, n, k,
                c.as_mut_ptr(), 1, n as isize,
                false,
                a.as_ptr(), csa, rsa,
                b.as_ptr(), csb, rsb,
                0.0f32, 1.0f32,
                false, false, false,
                gemm::Parallelism::None,
            );
        },
        Lib::Faer => {
            use faer::{Accum, MatMut, MatRef, Par};
            let am = match s.lay {
                Lay::NN | Lay::NT => MatRef::from_row_major_slice(&a[..m * k], m, k),
                Lay::TN | Lay::TT => MatRef::from_row_major_slice(&a[..m * k], k, m).transpose(),
            };
            let bm = match s.lay {
                Lay::NN | Lay::TN => MatRef::from_row_major_slice(&b[..k * n], k, n),
                Lay::NT | Lay::TT => MatRef::from_row_major_slice(&b[..k * n], n, k).transpose(),
            };
            let cm = MatMut::from_row_major_slice_mut(&mut c[..m * n], m, n);
            faer::linalg::matmul::matmul(cm, Accum::Replace, am, bm, 1.0f32, Par::Seq);
        }
    }
}

fn naive(s: &Shape, a: &[f32], b: &[f32]) -> Vec<f64> {
    let ((rsa, csa), (rsb, csb)) = strides(s);
    let mut c = vec![0f64; s.m * s.n];
    for i in 0..s.m {
        for j in 0..s.n {
            let mut acc = 0f64;
            for p in 0..s.k {
                let av = a[(i as isize * rsa + p as isize * csa) as usize] as f64;
                let bv = b[(p as isize * rsb + j as isize * csb) as usize] as f64;
                acc += av * bv;
            }
            c[i * s.n + j] = acc;
        }
    }
    c
}

fn rand_vec(len: usize, seed: &mut u64) -> Vec<f32> {
    (0..len)
        .map(|_| {
            *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((*seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

fn check(libs: &[Lib]) -> bool {
    let mut ok = true;
    let mut seed = 42u64;
    let mut cases: Vec<Shape> = Vec::new();
    for lay in [Lay::NN, Lay::TN, Lay::NT, Lay::TT] {
        cases.push(Shape { name: "small 7x5x9", m: 7, k: 5, n: 9, lay });
        cases.push(Shape { name: "small 33x17x19", m: 33, k: 17, n: 19, lay });
    }
    cases.extend(STEP.iter().copied());
    for s in &cases {
        let a = rand_vec(s.m * s.k, &mut seed);
        let b = rand_vec(s.k * s.n, &mut seed);
        let r = naive(s, &a, &b);
        for &lib in libs {
            let mut c = vec![f32::NAN; s.m * s.n]; // NaN: proves C is not read (beta=0)
            matmul(lib, s, &a, &b, &mut c);
            let maxerr = c
                .iter()
                .zip(&r)
                .map(|(x, y)| (*x as f64 - y).abs())
                .fold(0f64, |m, e| if e.is_nan() { f64::INFINITY } else { m.max(e) });
            let tol = 1e-5 * (s.k as f64).sqrt() + 1e-6;
            let pass = maxerr < tol;
            ok &= pass;
            println!(
                "check {:<22} {:<18} ({:>3},{:>3},{:>3}) {:?}: max|err| = {:.2e} {}",
                lib.name(), s.name, s.m, s.k, s.n, s.lay, maxerr,
                if pass { "OK" } else { "FAIL" }
            );
        }
    }
    ok
}

struct Bufs {
    a: Vec<Vec<f32>>,
    b: Vec<Vec<f32>>,
    c: Vec<Vec<f32>>,
}

fn bufs(shapes: &[Shape]) -> Bufs {
    let mut seed = 7u64;
    Bufs {
        a: shapes.iter().map(|s| rand_vec(s.m * s.k, &mut seed)).collect(),
        b: shapes.iter().map(|s| rand_vec(s.k * s.n, &mut seed)).collect(),
        c: shapes.iter().map(|s| vec![0f32; s.m * s.n]).collect(),
    }
}

fn flops(s: &Shape) -> f64 {
    2.0 * (s.m * s.n * s.k) as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) }
}

/// Time f() repeatedly: warm-up `warm`, then samples for about `budget`; returns
/// (median seconds, sample count).
fn time_it<F: FnMut()>(mut f: F, warm: Duration, budget: Duration) -> (f64, usize) {
    let t0 = Instant::now();
    while t0.elapsed() < warm {
        f();
    }
    let mut samples = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < budget || samples.len() < 20 {
        let t = Instant::now();
        f();
        samples.push(t.elapsed().as_secs_f64());
    }
    let n = samples.len();
    (median(&mut samples), n)
}

fn run_step(lib: Lib, b: &mut Bufs) {
    for (i, s) in STEP.iter().enumerate() {
        matmul(lib, s, black_box(&b.a[i]), black_box(&b.b[i]), &mut b.c[i]);
        black_box(&b.c[i]);
    }
}

fn shapes_bench(libs: &[Lib]) {
    let step_flops: f64 = STEP.iter().map(flops).sum();
    let all: Vec<Shape> = STEP.iter().chain(B256.iter()).copied().collect();
    let mut bb = bufs(&all);
    println!("| shape | (m,k,n) | layout | {} |", libs.iter().map(|l| l.name()).collect::<Vec<_>>().join(" | "));
    println!("|---|---|---|{}", "---:|".repeat(libs.len()));
    for (i, s) in all.iter().enumerate() {
        let mut cells = Vec::new();
        for &lib in libs {
            let (a, b, c) = (&bb.a[i], &bb.b[i], &mut bb.c[i]);
            let (t, _n) = time_it(
                || {
                    matmul(lib, s, black_box(a), black_box(b), c);
                    black_box(&c);
                },
                Duration::from_millis(100),
                Duration::from_millis(400),
            );
            cells.push(format!("{:.1}", flops(s) / t / 1e9));
        }
        println!("| {} | ({},{},{}) | {:?} | {} |", s.name, s.m, s.k, s.n, s.lay, cells.join(" | "));
    }
    let mut b = bufs(&STEP);
    let mut cells = Vec::new();
    let mut ms = Vec::new();
    for &lib in libs {
        let (t, _n) = time_it(|| run_step(lib, &mut b), Duration::from_millis(200), Duration::from_secs(2));
        cells.push(format!("**{:.1}**", step_flops / t / 1e9));
        ms.push(format!("{:.3} ms", t * 1e3));
    }
    println!("| **whole step (8 GEMMs)** | {:.1} MFLOP | | {} |", step_flops / 1e6, cells.join(" | "));
    println!("| step time (median) | | | {} |", ms.join(" | "));
}

/// Interference-robust variant: R rounds, libs interleaved inside each round; per cell
/// reports best (max) and median over rounds of the per-round median GFLOP/s.
fn rounds_bench(libs: &[Lib], rounds: usize) {
    let step_flops: f64 = STEP.iter().map(flops).sum();
    let all: Vec<Shape> = STEP.iter().chain(B256.iter()).copied().collect();
    let mut bb = bufs(&all);
    let mut sb = bufs(&STEP);
    // res[shape_idx (all.len() = step)][lib] -> Vec<gflops>
    let mut res = vec![vec![Vec::new(); libs.len()]; all.len() + 1];
    for _r in 0..rounds {
        for (i, s) in all.iter().enumerate() {
            for (li, &lib) in libs.iter().enumerate() {
                let (a, b, c) = (&bb.a[i], &bb.b[i], &mut bb.c[i]);
                let (t, _) = time_it(
                    || {
                        matmul(lib, s, black_box(a), black_box(b), c);
                        black_box(&c);
                    },
                    Duration::from_millis(30),
                    Duration::from_millis(120),
                );
                res[i][li].push(flops(s) / t / 1e9);
            }
        }
        for (li, &lib) in libs.iter().enumerate() {
            let (t, _) = time_it(|| run_step(lib, &mut sb), Duration::from_millis(50), Duration::from_millis(400));
            res[all.len()][li].push(step_flops / t / 1e9);
        }
    }
    println!("GFLOP/s, best / median of {rounds} rounds (each round: median of >=20 reps)");
    println!("| shape | (m,k,n) | layout | {} |", libs.iter().map(|l| l.name()).collect::<Vec<_>>().join(" | "));
    println!("|---|---|---|{}", "---:|".repeat(libs.len()));
    for i in 0..=all.len() {
        let cells: Vec<String> = res[i]
            .iter_mut()
            .map(|v| {
                let best = v.iter().cloned().fold(0f64, f64::max);
                let med = median(v);
                format!("{best:.1} / {med:.1}")
            })
            .collect();
        if i < all.len() {
            let s = &all[i];
            println!("| {} | ({},{},{}) | {:?} | {} |", s.name, s.m, s.k, s.n, s.lay, cells.join(" | "));
        } else {
            println!("| **whole step (8 GEMMs, {:.1} MFLOP)** | | | {} |", step_flops / 1e6, cells.join(" | "));
        }
    }
}

fn step_bench(lib: Lib, secs: f64) {
    let step_flops: f64 = STEP.iter().map(flops).sum();
    let mut b = bufs(&STEP);
    let (t, n) = time_it(
        || run_step(lib, &mut b),
        Duration::from_millis(300),
        Duration::from_secs_f64(secs),
    );
    println!(
        "step {} pid {}: median {:.3} ms/step over {} steps = {:.1} GFLOP/s",
        lib.name(), std::process::id(), t * 1e3, n, step_flops / t / 1e9
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("shapes");
    let libs: Vec<Lib> = if args.len() > 2 && mode != "step" {
        args[2..].iter().map(|s| Lib::parse(s)).collect()
    } else {
        vec![Lib::Mm, Lib::Gemm, Lib::Faer]
    };
    match mode {
        "check" => {
            if !check(&libs) {
                eprintln!("CORRECTNESS FAILURE");
                std::process::exit(1);
            }
            println!("all checks passed");
        }
        "shapes" => shapes_bench(&libs),
        "rounds" => rounds_bench(&libs, 7),
        "step" => {
            let lib = Lib::parse(args.get(2).map(String::as_str).unwrap_or("mm"));
            let secs: f64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(10.0);
            step_bench(lib, secs);
        }
        _ => panic!("mode: check | shapes | step"),
    }
}
