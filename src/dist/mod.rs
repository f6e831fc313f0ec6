//! Distribution: the MPI communicator (`comm`, the only MPI caller), the fusion plan
//! (`fusion`), and the gradient averaging that puts them together.

pub mod comm;
pub mod fusion;

pub use comm::Comm;
pub use fusion::FusionPlan;

use crate::error::{Error, Result};

/// Sums gradients across ranks bucket by bucket: one `MPI_Allreduce` per fusion bucket,
/// from the local gradient arena into the reduced arena (same layout). The caller scales by
/// 1/ranks inside the optimizer update.
pub struct GradReducer {
    pub plan: FusionPlan,
}

impl GradReducer {
    pub fn new(plan: FusionPlan) -> GradReducer {
        GradReducer { plan }
    }

    pub fn reduce_all(&self, comm: &Comm, local: &[f32], reduced: &mut [f32]) {
        for b in &self.plan.buckets {
            if comm.size == 1 {
                reduced[b.clone()].copy_from_slice(&local[b.clone()]);
            } else {
                comm.all_reduce_sum_f32(&local[b.clone()], &mut reduced[b.clone()]);
            }
        }
    }
}

/// Check that every rank holds the same value of `what` (e.g. a config fingerprint); on
/// disagreement, every rank returns the same error naming the ranks that differ from rank 0.
pub fn check_agreement(comm: &Comm, what: &str, value: u64) -> Result<()> {
    let all = comm.all_gather_u64(value);
    let differ: Vec<usize> = (0..all.len()).filter(|&r| all[r] != all[0]).collect();
    if differ.is_empty() {
        Ok(())
    } else {
        Err(Error::Mismatch(format!(
            "{what} differs from rank 0's on rank(s) {differ:?}; start every rank with the same job file, --set options and build"
        )))
    }
}
