//! bf16 matrix products on Intel AMX tiles (`TDPBF16PS`: 16 × 32 bf16 times 32 × 16 bf16
//! summed into 16 × 16 float32, per instruction), with a tile unit emulated in plain Rust that
//! runs the same blocking, packing and epilogue on any CPU (`unit.rs`).
//!
//! The product C = alpha · op(A) · op(B) + beta · C: both operands are rounded to bf16 and
//! packed into 1 KiB tiles (`pack.rs`: A's 16-row strips, B's 16-column strips in the VNNI
//! layout), C is cut into 32 × 32 blocks, each summed over all of k in four accumulator tiles
//! (2 A and 2 B tile loads per 4 tile products) and stored once through a 32 × 32 scratch,
//! where the epilogue applies alpha and beta, or, for a dense layer's forward
//! (`gemm_post`), the caller's row function (the CPU backend's bias, activation, kept
//! pre-activation and bf16 rounding of the output): the step's products are not followed by
//! another pass over the output.
//!
//! Blocking: threads take ranges of block columns (or block rows, where C has fewer block
//! columns than threads); within a range, 8 block rows (256 rows of A, their tiles 16 KiB a
//! k-tile… 512 KiB at k = 1024) stay in L2 while each B block column (32 columns, 2 KiB a
//! k-tile) passes them. Every element is summed by one unit in k order, so any thread count
//! gives the same bits.
//!
//! Must not: use `Unit::Tiles` unless `ready()`; change what float32 products compute; know
//! the CPU backend (its epilogue comes in as a function).

pub mod pack;
pub mod unit;

pub use unit::Unit;

use super::backend::Gemm;
use super::tile::View;
use pack::TILE;
use std::cell::RefCell;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// Block rows that stay in L2 while the block columns pass.
const MB: usize = 8;

/// Tile products (`TDPBF16PS` instructions) run on tiles, and products (`gemm` calls) that
/// used them, since the process started: the proof in the log that the tiles ran.
static TILE_OPS: AtomicU64 = AtomicU64::new(0);
static TILE_GEMMS: AtomicU64 = AtomicU64::new(0);

/// (tile products, matrix products) run on AMX tiles so far in this process.
pub fn counts() -> (u64, u64) {
    (TILE_OPS.load(Ordering::Relaxed), TILE_GEMMS.load(Ordering::Relaxed))
}

/// Whether the CPU says it has AMX-TILE and AMX-BF16 (CPUID leaf 7: EDX bits 24 and 22).
pub fn cpu_has_amx() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
        edx & (1 << 22) != 0 && edx & (1 << 24) != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this process may run tile instructions: the CPU has AMX-BF16 and AVX512-BF16 (the
/// packing's conversions), and Linux granted the tile data state (`arch_prctl(
/// ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, per process, Linux 5.16 and later); else why
/// not. Asked once.
pub fn ready() -> Result<(), String> {
    static READY: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    READY
        .get_or_init(|| {
            if !cpu_has_amx() {
                return Err("this CPU has no AMX-BF16 (no amx_bf16 in /proc/cpuinfo)".into());
            }
            if !super::bf16::supported() {
                return Err("this CPU has AMX-BF16 but not AVX512-BF16".into());
            }
            request_tile_permission()
        })
        .clone()
}

#[cfg(target_os = "linux")]
fn request_tile_permission() -> Result<(), String> {
    extern "C" {
        fn syscall(num: std::ffi::c_long, ...) -> std::ffi::c_long;
    }
    const SYS_ARCH_PRCTL: std::ffi::c_long = 158;
    const ARCH_REQ_XCOMP_PERM: std::ffi::c_long = 0x1023;
    const XFEATURE_XTILEDATA: std::ffi::c_long = 18;
    // SAFETY: arch_prctl with an integer argument; it changes no memory of ours.
    let r = unsafe { syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) };
    if r == 0 {
        Ok(())
    } else {
        Err(format!(
            "Linux refused the tile data state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): {}; \
             AMX needs Linux 5.16 or later)",
            std::io::Error::last_os_error()
        ))
    }
}

#[cfg(not(target_os = "linux"))]
fn request_tile_permission() -> Result<(), String> {
    Err("AMX tiles are used on Linux only".into())
}

/// What a dense layer's forward does where a block of C is stored: `row(out, bias, z)` on each
/// row's part of the block (out holds x·W there; `bias` is the bias of those columns, `z` the
/// same part of `keep_z`), the caller's epilogue (the CPU backend's bias, activation and bf16
/// rounding: `Cpu::dense`), so that this module knows no activation.
pub struct Post<'a> {
    pub bias: &'a [f32],
    pub keep_z: Option<&'a mut [f32]>,
    pub row: &'a (dyn Fn(&mut [f32], &[f32], Option<&mut [f32]>) + Sync),
}

/// C = alpha · op(A) · op(B) + beta · C with bf16 operands and float32 sums, on `unit`.
pub fn gemm(unit: Unit, g: Gemm, a: &[f32], b: &[f32], c: &mut [f32]) {
    run(unit, g, a, b, c, None)
}

/// A dense layer's forward: C = op(A) · op(B) (`g`'s alpha 1 and beta 0), then `post` applied
/// as each block is stored.
pub fn gemm_post(unit: Unit, g: Gemm, a: &[f32], b: &[f32], c: &mut [f32], post: Post) {
    assert!(g.alpha == 1.0 && g.beta == 0.0 && post.bias.len() == g.n, "gemm_post: a forward product");
    assert!(post.keep_z.as_ref().is_none_or(|z| z.len() >= g.m * g.n));
    run(unit, g, a, b, c, Some(post))
}

thread_local! {
    /// The calling thread's packed A and B, kept between calls (no allocation per product).
    static PACKED: RefCell<(Vec<u32>, Vec<u32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// A pointer shared by the pool's threads, which write disjoint parts behind it.
struct Shared<T>(*mut T);
// SAFETY: each part writes its own strips or blocks; `pool::run` returns after every part.
unsafe impl<T> Sync for Shared<T> {}

fn run(unit: Unit, g: Gemm, a: &[f32], b: &[f32], c: &mut [f32], mut post: Option<Post>) {
    g.check(a.len(), b.len(), c.len());
    assert!(unit != Unit::Tiles || ready().is_ok(), "AMX tiles used without ready()");
    if super::tile::trivial(g, c) {
        if let Some(p) = post.as_mut() {
            let z = p.keep_z.as_mut().map(|z| z.as_mut_ptr());
            // SAFETY: C and keep_z hold m × n floats (`check`, `gemm_post`).
            unsafe { store_post(c.as_mut_ptr(), z, g.n, 0..g.m, 0..g.n, p) };
        }
        return;
    }
    let Gemm { m, k, n, ta, tb, alpha, beta } = g;
    let kt = k.div_ceil(32);
    let (mb, nb) = (m.div_ceil(32), n.div_ceil(32));
    let av = View::op(a, m, k, ta);
    // X = op(B)ᵀ (n × k): B's columns as rows, what B's tiles are packed from.
    let bview = View::op(b, k, n, tb);
    let bt = View { d: b, rs: bview.cs, cs: bview.rs };
    let threads = if 2.0 * (m * n * k) as f64 >= 2e6 { super::pool::threads() } else { 1 };
    PACKED.with(|p| {
        let (pa, pb) = &mut *p.borrow_mut();
        pa.resize(2 * mb * kt * TILE, 0);
        pb.resize(2 * nb * kt * TILE, 0);
        // Packing: each thread a share of A's strips and of B's.
        let (ap, bp) = (Shared(pa.as_mut_ptr()), Shared(pb.as_mut_ptr()));
        let (ap, bp) = (&ap, &bp);
        super::pool::run(threads, &|i| {
            for (x, rows, strips, out, transposed) in [(av, m, 2 * mb, ap, false), (bt, n, 2 * nb, bp, true)] {
                let per = strips.div_ceil(threads);
                let s = (i * per).min(strips)..((i + 1) * per).min(strips);
                // SAFETY: strips s of the buffer sized above; the parts' ranges are disjoint.
                let out =
                    unsafe { std::slice::from_raw_parts_mut(out.0.add(s.start * kt * TILE), s.len() * kt * TILE) };
                pack::strips(x, rows, k, s.start, s.len(), transposed, out);
            }
        });
        // The blocks: whole block columns per thread, or block rows where there are fewer
        // block columns than threads.
        let by_cols = nb >= threads || mb < threads;
        let parts = threads.min(if by_cols { nb } else { mb }).max(1);
        let (pa, pb) = (&pa[..], &pb[..]);
        let cp = Shared(c.as_mut_ptr());
        let mut z = post.as_mut().and_then(|p| p.keep_z.take());
        let zp = z.as_mut().map(|z| Shared(z.as_mut_ptr()));
        let (cp, zp, post) = (&cp, &zp, &post);
        super::pool::run(parts, &|i| {
            let split = |len: usize| (i * len.div_ceil(parts)).min(len)..((i + 1) * len.div_ceil(parts)).min(len);
            let (rows, cols) = if by_cols { (0..mb, split(nb)) } else { (split(mb), 0..nb) };
            let mut out = [0f32; 1024];
            let tu = unit::Configured::new(unit);
            for ic in rows.clone().step_by(MB) {
                for jb in cols.clone() {
                    for ib in ic..(ic + MB).min(rows.end) {
                        let (a0, a1) = (strip(pa, 2 * ib, kt), strip(pa, 2 * ib + 1, kt));
                        tu.block(a0, a1, strip(pb, 2 * jb, kt), strip(pb, 2 * jb + 1, kt), kt, &mut out);
                        let (r, cl) = (32 * ib..(32 * ib + 32).min(m), 32 * jb..(32 * jb + 32).min(n));
                        // SAFETY: this part's block of C (and of keep_z), disjoint from the
                        // other parts'; both hold m × n floats (`check`, `gemm_post`).
                        unsafe {
                            match post {
                                None => store(&out, cp.0, n, r, cl, alpha, beta),
                                Some(p) => {
                                    store(&out, cp.0, n, r.clone(), cl.clone(), 1.0, 0.0);
                                    store_post(cp.0, zp.as_ref().map(|z| z.0), n, r, cl, p);
                                }
                            }
                        }
                    }
                }
            }
            if unit == Unit::Tiles {
                TILE_OPS.fetch_add((rows.len() * cols.len() * kt * 4) as u64, Ordering::Relaxed);
            }
        });
    });
    if unit == Unit::Tiles {
        TILE_GEMMS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Strip `s` of a packed operand (`kt` tiles).
fn strip(buf: &[u32], s: usize, kt: usize) -> &[u32] {
    &buf[s * kt * TILE..(s + 1) * kt * TILE]
}

/// C[rows, cols] = alpha · out + beta · C (C unread when beta is 0); `out` is the block's
/// 32 × 32 scratch (row r, column j of the block at r·32 + j).
///
/// # Safety
/// C at `c` holds rows × cols (rows `ldc` apart), and no other thread writes them.
unsafe fn store(
    out: &[f32; 1024],
    c: *mut f32,
    ldc: usize,
    rows: Range<usize>,
    cols: Range<usize>,
    alpha: f32,
    beta: f32,
) {
    let w = cols.len();
    for (r, i) in rows.enumerate() {
        let src = &out[r * 32..r * 32 + w];
        let dst = std::slice::from_raw_parts_mut(c.add(i * ldc + cols.start), w);
        if beta == 0.0 {
            dst.iter_mut().zip(src).for_each(|(c, s)| *c = alpha * s);
        } else {
            dst.iter_mut().zip(src).for_each(|(c, s)| *c = alpha * s + beta * *c);
        }
    }
}

/// The forward's epilogue on C[rows, cols] (which holds x·W there): `p.row` on each row's part,
/// with the bias of those columns and the same part of the kept pre-activation (`z`, laid out
/// as C).
///
/// # Safety
/// As `store`, for C and for `z`.
unsafe fn store_post(c: *mut f32, z: Option<*mut f32>, ldc: usize, rows: Range<usize>, cols: Range<usize>, p: &Post) {
    let bias = &p.bias[cols.clone()];
    for i in rows {
        let at = i * ldc + cols.start;
        let row = std::slice::from_raw_parts_mut(c.add(at), cols.len());
        let zrow = z.map(|z| std::slice::from_raw_parts_mut(z.add(at), cols.len()));
        (p.row)(row, bias, zrow);
    }
}

/// The tiles against the emulated unit on products whose every sum is exact (small integers,
/// exact in bf16 and float32 whatever the order): bit for bit, every transpose, edges on
/// every side, more than one k-tile and block, and the epilogue. Run once before the tiles are
/// trusted with training; an error says what differed.
pub fn check_tiles() -> Result<(), String> {
    ready()?;
    let v = |i: usize, s: usize| ((i * 7 + s * 13) % 9) as f32 - 4.0;
    for &(m, k, n) in &[(37, 70, 45), (16, 32, 16), (70, 100, 3)] {
        for ta in [super::Trans::N, super::Trans::T] {
            for tb in [super::Trans::N, super::Trans::T] {
                let g = Gemm { m, k, n, ta, tb, alpha: 1.0, beta: 0.5 };
                let a: Vec<f32> = (0..m * k).map(|i| v(i, 1)).collect();
                let b: Vec<f32> = (0..k * n).map(|i| v(i, 2)).collect();
                let c0: Vec<f32> = (0..m * n).map(|i| v(i, 3)).collect();
                let (mut on_tiles, mut emulated) = (c0.clone(), c0.clone());
                gemm(Unit::Tiles, g, &a, &b, &mut on_tiles);
                gemm(Unit::Emulated, g, &a, &b, &mut emulated);
                if let Some(i) = (0..m * n).find(|&i| on_tiles[i].to_bits() != emulated[i].to_bits()) {
                    return Err(format!(
                        "AMX tiles gave {} where the emulated unit gives {} (element {i} of a {m}×{k}×{n} product, {ta:?}{tb:?})",
                        on_tiles[i], emulated[i]
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
