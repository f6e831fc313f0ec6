//! A checkpoint's parts checked on every rank at once (collective): while rank 0 looks for the
//! checkpoint to resume (`restore::prepare_output`), it sends each candidate written in parts
//! to every rank (`Lead::verify`), rank r reads and checksums parts r, r + N, … of it
//! (`parts::verify_part`), and rank 0 gathers the answers and checks that together the parts
//! hold every position once (`parts::check_coverage`). A damaged part is then an error on rank
//! 0 naming that part, as when rank 0 read every part itself, so `--resume auto` still falls
//! back to an older checkpoint; the parts are read N at a time instead of one.
//!
//! Must not: choose the checkpoint (rank 0's `checkpoint::newest_valid_by` does), or leave a
//! rank waiting: rank 0 ends the exchange with `Lead::finish` whatever it found.

use crate::checkpoint::parts::{self, Parts};
use crate::checkpoint::whole::Unread;
use crate::checkpoint::Source;
use crate::error::{CheckpointKind, Error, Result};
use crate::model::Mlp;
use crate::parallel::Comm;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What a rank found of one part it checked.
#[derive(Serialize, Deserialize)]
enum Answer {
    /// Part `.0` is whole: its runs of the stored order.
    Runs(usize, Vec<(usize, usize)>),
    /// Part `part` is damaged: the error's file, field and message.
    Damaged { part: usize, file: PathBuf, field: String, msg: String },
}

/// Rank 0's side: each candidate's parts checked on every rank.
pub(super) struct Lead<'a> {
    comm: &'a Comm,
}

impl<'a> Lead<'a> {
    /// Rank 0 only; the others `serve` meanwhile.
    pub fn new(comm: &'a Comm) -> Lead<'a> {
        assert_eq!(comm.rank, 0, "rank 0 leads the check of a checkpoint's parts");
        Lead { comm }
    }

    /// Collective with the other ranks' `serve`: `parts` (of the checkpoint at `step` of
    /// `model`) checked, a share on each rank; the damaged part of lowest number's error.
    pub fn verify(&mut self, p: &Parts, step: u64, model: &Mlp) -> Result<()> {
        let t = std::time::Instant::now();
        let k = p.checksums.len();
        broadcast_source(self.comm, Some((step, &Source::Parts(p.clone()))), true);
        let answers = self.comm.all_gather_bytes(&share(self.comm, p, step));
        let mut runs: Vec<Option<Vec<(usize, usize)>>> = vec![None; k];
        let mut damaged: Option<(usize, Error)> = None;
        for a in answers.iter().flat_map(|b| serde_json::from_slice::<Vec<Answer>>(b).expect("a rank's answers")) {
            match a {
                Answer::Runs(r, v) => runs[r] = Some(v),
                Answer::Damaged { part, file, field, msg } => {
                    if damaged.as_ref().is_none_or(|(r, _)| part < *r) {
                        damaged = Some((part, Error::checkpoint(file, field, CheckpointKind::Damaged, msg)));
                    }
                }
            }
        }
        if let Some((_, e)) = damaged {
            return Err(e);
        }
        let runs: Vec<Vec<(usize, usize)>> = runs.into_iter().map(|r| r.expect("every part answered")).collect();
        parts::check_coverage(p, step, model, &runs)?;
        if self.comm.size > 1 {
            log::info!(
                "checked the checkpoint's {k} parts on {} ranks at once in {:.2} s",
                self.comm.size.min(k),
                t.elapsed().as_secs_f64()
            );
        }
        Ok(())
    }

    /// Tells the other ranks that rank 0 has chosen (they return from `serve`).
    pub fn finish(self) {
        broadcast_source(self.comm, None, true);
    }
}

/// Every rank but 0, while rank 0 chooses the checkpoint: check its share of each candidate's
/// parts that rank 0 sends, until rank 0 says it is done (`Lead::finish`).
pub(super) fn serve(comm: &Comm) {
    while let Some((step, src)) = broadcast_source(comm, None, true) {
        let Source::Parts(p) = src else { unreachable!("rank 0 sends parts to check") };
        comm.all_gather_bytes(&share(comm, &p, step));
    }
}

/// Collective: rank 0's checkpoint source (`src`, at its step; the other ranks' is ignored) on
/// every rank, None where rank 0 has none. Seven words (kind: 0 none, 1 parts, 2 whole; step;
/// the parts' token and count, or 0 and 0; m, v and the moving average: whether the parts
/// hold them, or the whole file's lengths), the parts' checksums when `checksums` (else zeros: the readers need only
/// their count), and the folder or file. Every rank passes the same `checksums`.
pub(super) fn broadcast_source(comm: &Comm, src: Option<(u64, &Source)>, checksums: bool) -> Option<(u64, Source)> {
    let mut words = [0u64; 7];
    let mut path = String::new();
    let mut sums = Vec::new();
    match src.filter(|_| comm.rank == 0) {
        Some((step, Source::Parts(p))) => {
            words = [1, step, p.token, p.checksums.len() as u64, u64::from(p.m), u64::from(p.v), u64::from(p.ema)];
            path = p.dir.to_string_lossy().into_owned();
            sums = p.checksums.clone();
        }
        Some((step, Source::Whole(u))) => {
            words = [2, step, 0, 0, u.m as u64, u.v as u64, u.ema as u64];
            path = u.path.to_string_lossy().into_owned();
        }
        None => {}
    }
    comm.broadcast_u64(&mut words);
    if words[0] == 0 {
        return None;
    }
    sums.resize(words[3] as usize, 0);
    if checksums && words[0] == 1 {
        comm.broadcast_u64(&mut sums);
    }
    let path = comm.all_gather_bytes(if comm.rank == 0 { path.as_bytes() } else { &[] }).swap_remove(0);
    let path = PathBuf::from(String::from_utf8_lossy(&path).into_owned());
    Some((
        words[1],
        match words[0] {
            1 => Source::Parts(Parts {
                dir: path,
                token: words[2],
                checksums: sums,
                m: words[4] != 0,
                v: words[5] != 0,
                ema: words[6] != 0,
            }),
            _ => Source::Whole(Unread { path, m: words[4] as usize, v: words[5] as usize, ema: words[6] as usize }),
        },
    ))
}

/// This rank's answers for its parts of `p` (r, r + N, …), as JSON.
fn share(comm: &Comm, p: &Parts, step: u64) -> Vec<u8> {
    let answers: Vec<Answer> = (comm.rank..p.checksums.len())
        .step_by(comm.size)
        .map(|r| match parts::verify_part(p, step, r).map_err(crate::checkpoint::damaged) {
            Ok(runs) => Answer::Runs(r, runs),
            Err(Error::Checkpoint { file, field, msg, .. }) => Answer::Damaged { part: r, file, field, msg },
            Err(e) => Answer::Damaged { part: r, file: p.path(step, r), field: "(file)".into(), msg: e.to_string() },
        })
        .collect();
    serde_json::to_vec(&answers).expect("answers serialize")
}
