//! `hvtrain bench pieces` (run it under mpirun): buffers longer than one MPI call may carry
//! (2^31 − 1 elements), sent for real and checked element by element on every rank: a
//! float32 broadcast from rank 0, and a ring exchange of 16-bit words (what the fp16/bf16
//! ring sends). The proof that `parallel::comm`'s pieces carry what MPI's `int` counts cannot,
//! at a size tests cannot afford (2^31 + 7 elements: 8 GiB of float32 per rank).
//!
//! Must not: be used by training.

use crate::error::{Error, Result};
use crate::parallel::Comm;
use log::info;
use std::time::Instant;

/// The value element `i` holds, from rank `r`'s point of view (distinct across a piece's
/// boundary, so a piece sent twice or shifted is seen).
fn word(i: usize, r: usize) -> u16 {
    ((i.wrapping_mul(40503) >> 7) as u16) ^ (r as u16).wrapping_mul(0x9E37)
}
fn value(i: usize) -> f32 {
    (i % 16_777_213) as f32
}

/// Collective: both checks on `n` elements; an error names the first wrong element.
pub fn run(comm: &Comm, n: usize) -> Result<()> {
    let (rank, size) = (comm.rank, comm.size);
    if rank == 0 {
        info!(
            "{n} elements on {size} rank(s), pieces of at most {} elements (MPI's count is a 32-bit int)",
            crate::parallel::comm::piece()
        );
    }
    let mut bad = [0.0f64; 2];
    // 1. A float32 broadcast from rank 0.
    let _a = crate::mem::allocating("the broadcast buffer");
    let mut buf: Vec<f32> = if rank == 0 { (0..n).map(value).collect() } else { crate::mem::zeros(n)? };
    comm.barrier();
    let t = Instant::now();
    comm.broadcast_f32(&mut buf);
    let secs = t.elapsed().as_secs_f64();
    let wrong = buf.iter().enumerate().position(|(i, &v)| v != value(i));
    if let Some(i) = wrong {
        log::error!("rank {rank}: broadcast element {i} is {} (want {})", buf[i], value(i));
        bad[0] = 1.0;
    }
    drop(buf);
    info!(
        "rank {rank}: float32 broadcast of {n} elements ({:.1} GiB) in {secs:.2} s: {}",
        n as f64 * 4.0 / (1u64 << 30) as f64,
        if wrong.is_none() { "every element right" } else { "WRONG" }
    );
    // 2. A ring exchange of 16-bit words: to the next rank, from the previous one.
    let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
    let out: Vec<u16> = (0..n).map(|i| word(i, rank)).collect();
    let mut inp: Vec<u16> = crate::mem::zeros(n)?;
    comm.barrier();
    let t = Instant::now();
    comm.exchange(&out, next, &mut inp, prev);
    let secs = t.elapsed().as_secs_f64();
    drop(out);
    let wrong = inp.iter().enumerate().position(|(i, &w)| w != word(i, prev));
    if let Some(i) = wrong {
        log::error!("rank {rank}: exchanged word {i} is {} (want {})", inp[i], word(i, prev));
        bad[1] = 1.0;
    }
    info!(
        "rank {rank}: 16-bit ring exchange of {n} elements ({:.1} GiB) in {secs:.2} s: {}",
        n as f64 * 2.0 / (1u64 << 30) as f64,
        if wrong.is_none() { "every element right" } else { "WRONG" }
    );
    comm.all_reduce_sum_f64(&mut bad);
    if bad.iter().any(|&b| b > 0.0) {
        return Err(Error::Training(format!(
            "buffers of {n} elements arrived wrong on {} rank(s) (broadcast) and {} (exchange): see the lines above",
            bad[0], bad[1]
        )));
    }
    Ok(())
}
