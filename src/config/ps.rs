//! `[distribution]` strategy = "parameter_server": the checks that need only the job file
//! (the rank count is checked at start-up, in `train::ps`).

use super::{Compression, Job, Strategy};
use crate::error::{Error, Result};

/// Most servers and the largest bound on staleness a job may ask for.
pub const MAX_SERVERS: usize = 4096;
pub const MAX_STALENESS: i64 = 1_000_000;

impl Job {
    pub(super) fn validate_ps(&self, origin: &str) -> Result<()> {
        let bad = |field: &str, msg: String| Err(Error::config(origin, field, msg));
        let d = &self.distribution;
        if d.servers < 1 || d.servers > MAX_SERVERS {
            return bad(
                "distribution.servers",
                format!("must be at least 1 and at most {MAX_SERVERS}, got {}", d.servers),
            );
        }
        if d.staleness < -1 || d.staleness > MAX_STALENESS {
            return bad(
                "distribution.staleness",
                format!(
                    "must be -1 (fully asynchronous), 0 (synchronous) or a bound K from 1 to {MAX_STALENESS} steps, got {}",
                    d.staleness
                ),
            );
        }
        if d.strategy != Strategy::ParameterServer {
            return Ok(());
        }
        if d.compression != Compression::None {
            return bad(
                "distribution.compression",
                format!(
                    "{:?} compresses the all-reduce ring; strategy = \"parameter_server\" sends exact float32 \
                     gradients and parameters: set compression = \"none\" or strategy = \"allreduce\"",
                    d.compression
                )
                .to_lowercase(),
            );
        }
        if self.parallel.tensor > 1 {
            return bad(
                "parallel.tensor",
                format!(
                    "parallel.tensor = {}: tensor parallelism is not available with strategy = \"parameter_server\" \
                     (servers hold whole buckets of the whole model); use tensor = 1 or strategy = \"allreduce\"",
                    self.parallel.tensor
                ),
            );
        }
        for (field, v) in
            [("parallel.pipeline", self.parallel.pipeline), ("parallel.micro_batches", self.parallel.micro_batches)]
        {
            if v > 1 {
                return bad(
                    field,
                    format!(
                        "{field} = {v}: pipeline stages and micro-batches are not available with strategy = \
                         \"parameter_server\" (a worker trains the whole model, one batch per step); use 1 or \
                         strategy = \"allreduce\""
                    ),
                );
            }
        }
        Ok(())
    }
}

/// The world's ranks split into workers and servers: (workers, servers), or the error that
/// names what is wrong. `ranks`: the job's world size.
pub fn roles(job: &Job, ranks: usize) -> Result<(usize, usize)> {
    let s = job.distribution.servers;
    if s >= ranks {
        return Err(Error::config(
            &job.source,
            "distribution.servers",
            format!(
                "{s} server(s) with {ranks} rank(s) leaves no worker: the last `servers` ranks serve and the others \
                 train, so start at least {} ranks or lower distribution.servers",
                s + 1
            ),
        ));
    }
    Ok((ranks - s, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(sets: &[&str]) -> Result<Job> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        Job::parse("job", "[data]\ntrain='x'\n[model]\nlayers=[4,8,2]\n", &sets)
    }
    fn field(r: Result<Job>) -> String {
        match r {
            Err(Error::Config { field, .. }) => field,
            other => panic!("expected a config error, got {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn keys_default_parse_and_validate() {
        let j = parse(&[]).unwrap();
        assert_eq!(
            (j.distribution.strategy, j.distribution.servers, j.distribution.staleness),
            (Strategy::Allreduce, 1, 0)
        );
        let j =
            parse(&["distribution.strategy=parameter_server", "distribution.servers=2", "distribution.staleness=-1"])
                .unwrap();
        assert_eq!(
            (j.distribution.strategy, j.distribution.servers, j.distribution.staleness),
            (Strategy::ParameterServer, 2, -1)
        );
        assert_eq!(field(parse(&["distribution.staleness=-2"])), "distribution.staleness");
        assert_eq!(field(parse(&["distribution.servers=0"])), "distribution.servers");
        assert_eq!(field(parse(&["distribution.strategy=gossip"])), "distribution.strategy");
        let ps = "distribution.strategy=parameter_server";
        assert_eq!(field(parse(&[ps, "distribution.compression=bf16"])), "distribution.compression");
        assert!(parse(&["distribution.compression=bf16"]).is_ok(), "compression stays for all-reduce");
        assert_eq!(field(parse(&[ps, "parallel.tensor=2"])), "parallel.tensor");
        assert_eq!(field(parse(&[ps, "parallel.pipeline=2"])), "parallel.pipeline");
        assert_eq!(field(parse(&[ps, "parallel.micro_batches=2"])), "parallel.micro_batches");
        assert_eq!(roles(&parse(&[ps, "distribution.servers=2"]).unwrap(), 5).unwrap(), (3, 2));
        assert!(roles(&parse(&[ps]).unwrap(), 1).is_err());
    }
}
