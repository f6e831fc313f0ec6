//! `hvtrain bench allreduce` under a real `mpirun`: every path (raw `MPI_Allreduce`, the
//! engine's fused path inline and on its communication thread) writes into a buffer of its
//! own, reset before it runs, and the bench checks every element against the sum it computes
//! itself; a wrong sum aborts the run. Small sizes and several buckets per size.

mod common;
use common::*;

#[test]
fn bench_allreduce_checks_every_path_and_succeeds() {
    let _g = mpi_lock();
    let dir = scratch("bench-allreduce");
    for ranks in [2, 3] {
        let args = [
            "bench",
            "allreduce",
            "--min-bytes",
            "4096",
            "--max-bytes",
            "1048576",
            "--threshold-mb",
            "0.01",
            "--seconds",
            "0.02",
        ];
        let run = mpirun(ranks, &args, &dir, 120);
        assert!(run.ok(), "{ranks} ranks\n{}", run.all());
        let rows: Vec<Vec<&str>> = run
            .stdout
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| l.split_whitespace().collect())
            .collect();
        let sizes: Vec<&str> = rows.iter().map(|r| r[0]).collect();
        assert_eq!(sizes, ["4096", "16384", "65536", "262144", "1048576"], "{}", run.all());
        // The larger sizes span several buckets, so a bucket left out would show.
        let buckets: usize = rows.last().unwrap().last().unwrap().parse().unwrap();
        assert!(buckets > 10, "{buckets} buckets\n{}", run.all());
    }
}
