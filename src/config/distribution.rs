//! `[distribution]`: how gradients travel (fusion buckets, order, overlap, compression), the
//! liveness limits, the consistency check, and the strategy (all-reduce or parameter
//! servers, with their servers and staleness), with the checks of those keys; `roles` splits
//! the world into workers and servers once the rank count is known.
//!
//! Must not: know the rank count beyond `roles`, or call MPI.

use super::{limits, real, Job};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DistributionCfg {
    /// Gradients are packed into buckets of at most this many MiB; each bucket is one
    /// MPI_Allreduce. A tensor larger than this travels alone. 0 means one bucket per tensor.
    /// Environment: HVTRAIN_FUSION_THRESHOLD (bytes, as Horovod's HOROVOD_FUSION_THRESHOLD).
    #[serde(default = "default_fusion")]
    pub fusion_threshold_mb: f64,
    /// A smaller threshold for the first bucket in reduction order, so communication starts
    /// sooner (PyTorch DDP does this with 1 MiB). 0: the same as the others.
    /// Environment: HVTRAIN_FIRST_BUCKET (bytes).
    #[serde(default)]
    pub first_bucket_mb: f64,
    /// Which end of the network fills buckets first: `backward` (the last layer's gradients,
    /// ready first: best for overlap) or `forward`. Environment: HVTRAIN_BUCKET_ORDER.
    #[serde(default = "default_order")]
    pub bucket_order: BucketOrder,
    /// Reduce a bucket on the communication thread as soon as backward has filled it, while
    /// backward goes on. Environment: HVTRAIN_OVERLAP (0/1).
    #[serde(default = "super::yes")]
    pub overlap: bool,
    /// Gradient compression on the wire: `none` (exact float32), `fp16` or `bf16`.
    /// Environment: HVTRAIN_COMPRESSION.
    #[serde(default = "default_compression")]
    pub compression: Compression,
    /// How the ranks' gradients are combined: `average` (the sum of every rank's gradient, each
    /// divided by the global row count: the mean) or `adasum` (Horovod's Adasum, per tensor).
    #[serde(default)]
    pub reduction: Reduction,
    /// Reduce inside each node first (shared memory), all-reduce among one rank per node, then
    /// broadcast inside the node (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE). Environment:
    /// HVTRAIN_HIERARCHICAL_ALLREDUCE (0/1).
    #[serde(default)]
    pub hierarchical: bool,
    /// Time the first steps with each of a few fusion settings (bucket size, a smaller first
    /// bucket) and keep the fastest, as Horovod's HOROVOD_AUTOTUNE does; the choice and every
    /// candidate's time go to OUTPUT_DIR/autotune.json, which a later run in the same
    /// output.dir reuses instead of tuning again. Environment: HVTRAIN_AUTOTUNE (0/1).
    #[serde(default)]
    pub autotune: bool,
    /// Steps timed per autotune candidate.
    #[serde(default = "default_autotune_steps")]
    pub autotune_steps: usize,
    /// A rank whose heartbeats stop for this many seconds is dead, stopped or unreachable, and
    /// the job ends. A rank that is only slow keeps sending heartbeats, so this is not a
    /// deadline on any operation (it was one before heartbeats; it still is when MPI grants
    /// no MPI_THREAD_MULTIPLE). Environment: HVTRAIN_WATCHDOG_SECONDS.
    #[serde(default = "default_watchdog")]
    pub watchdog_seconds: f64,
    /// The job ends when every rank is alive but none has completed a step or moved on to
    /// another phase for this many seconds: the longest any single phase (one step, a
    /// checkpoint write, a data read, an evaluation) may take. Environment: HVTRAIN_STALL_SECONDS.
    #[serde(default = "default_stall")]
    pub stall_seconds: f64,
    /// From the process's first line to the heartbeats' start (MPI_Init and the communicator
    /// set-up): a rank that has not got there by then says where it is stuck and exits 1, so
    /// the launcher ends the job. Environment: HVTRAIN_STARTUP_SECONDS.
    #[serde(default = "default_startup")]
    pub startup_seconds: f64,
    /// After every output is written and synced: how long a rank waits for the others at the
    /// end (the final handshake, then MPI_Finalize) before it says which rank did not finish
    /// and ends the job with exit code 5 (done; a rank hung at exit). Environment:
    /// HVTRAIN_FINISH_SECONDS.
    #[serde(default = "default_finish")]
    pub finish_seconds: f64,
    /// Compare a checksum of the parameters across ranks every this many steps (0: never).
    /// Environment: HVTRAIN_CHECK_EVERY.
    #[serde(default = "default_check_every")]
    pub check_every: usize,
    /// `allreduce` (Horovod-style, the default) or `parameter_server` (see `src/parallel/ps`).
    #[serde(default)]
    pub strategy: Strategy,
    /// How gradient buckets on GPUs travel between ranks: `auto` (NCCL when every rank has a
    /// GPU of its own and NCCL loads, else host), `nccl`, `mpi` (device pointers to a CUDA-aware
    /// MPI), `host` (through pinned host memory and MPI). CPU ranks always go through MPI.
    #[serde(default)]
    pub gpu_allreduce: GpuAllreduce,
    /// Parameter servers: the last `servers` ranks hold the parameters; the others are workers.
    #[serde(default = "super::one")]
    pub servers: usize,
    /// Parameter servers: 0 synchronous; K > 0: a worker may be at most K steps ahead of the
    /// slowest; -1 fully asynchronous.
    #[serde(default)]
    pub staleness: i64,
    /// What the data-parallel ranks divide among themselves instead of each keeping a whole
    /// copy (ZeRO's stages, FSDP's strategies): `none`; `optimizer` (the optimizer state and
    /// its update: each rank updates its 1/D of the parameters, then they are all-gathered);
    /// `gradients` (as `optimizer`, and the gradients are reduce-scattered: each rank receives
    /// only its part of the sum); `parameters` (as `gradients`, and each rank keeps only its
    /// part of the parameters: each layer is gathered just before it is used).
    #[serde(default)]
    pub shard: Shard,
    /// With `shard = "parameters"`: gather the step's next layer on a thread of its own while
    /// this one computes (FSDP's forward and backward prefetch), at the cost of a second
    /// layer's window; needs MPI_THREAD_MULTIPLE and host memory (on a GPU, or without it,
    /// each layer is gathered when used). Environment: HVTRAIN_PREFETCH (0/1).
    #[serde(default = "super::yes")]
    pub prefetch: bool,
}

/// `distribution.shard`: ZeRO stage 1 (`optimizer`, FSDP has none), 2 (`gradients`,
/// SHARD_GRAD_OP), 3 (`parameters`, FULL_SHARD); `none` is DDP's NO_SHARD.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Shard {
    #[default]
    None,
    Optimizer,
    Gradients,
    Parameters,
}

impl Shard {
    /// Whether each rank keeps only its part of the optimizer state.
    pub fn optimizer(self) -> bool {
        self != Shard::None
    }
    /// Whether the gradient buckets are reduce-scattered (each rank receives its piece of
    /// the sum) instead of all-reduced.
    pub fn reduce_scatters(self) -> bool {
        matches!(self, Shard::Gradients | Shard::Parameters)
    }
    /// The name in the job file.
    pub fn name(self) -> &'static str {
        match self {
            Shard::None => "none",
            Shard::Optimizer => "optimizer",
            Shard::Gradients => "gradients",
            Shard::Parameters => "parameters",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    #[default]
    Allreduce,
    ParameterServer,
}

/// `distribution.gpu_allreduce`.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum GpuAllreduce {
    #[default]
    Auto,
    Nccl,
    Mpi,
    Host,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BucketOrder {
    Backward,
    Forward,
}

/// `distribution.reduction`.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Reduction {
    /// The exact mean (sum-and-average), as Horovod's default `op=Average`.
    #[default]
    Average,
    /// Adaptive summation (Horovod's `op=Adasum`), see `parallel/adasum.rs`.
    Adasum,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    None,
    Fp16,
    Bf16,
}

fn default_fusion() -> f64 {
    64.0
}
fn default_order() -> BucketOrder {
    BucketOrder::Backward
}
fn default_compression() -> Compression {
    Compression::None
}
fn default_autotune_steps() -> usize {
    10
}
fn default_watchdog() -> f64 {
    8.0
}
fn default_stall() -> f64 {
    600.0
}
/// 15 minutes: MPI_Init of thousands of ranks (PMIx wire-up, binaries and libraries loaded
/// from a cold parallel file system) takes tens of seconds to a few minutes on large systems;
/// this stays well clear of that and still bounds a start-up that will never finish.
fn default_startup() -> f64 {
    900.0
}
/// 30 s: every rank passed the final barrier (they all finished training) before this wait
/// starts, so what is left is local (MPI_Finalize's clean-up); only a rank stopped or hung
/// there takes longer.
fn default_finish() -> f64 {
    30.0
}
fn default_check_every() -> usize {
    200
}

impl Default for DistributionCfg {
    fn default() -> Self {
        DistributionCfg {
            fusion_threshold_mb: default_fusion(),
            first_bucket_mb: 0.0,
            bucket_order: default_order(),
            overlap: super::yes(),
            compression: default_compression(),
            reduction: Reduction::Average,
            hierarchical: false,
            autotune: false,
            autotune_steps: default_autotune_steps(),
            watchdog_seconds: default_watchdog(),
            stall_seconds: default_stall(),
            startup_seconds: default_startup(),
            finish_seconds: default_finish(),
            check_every: default_check_every(),
            strategy: Strategy::Allreduce,
            gpu_allreduce: GpuAllreduce::Auto,
            servers: 1,
            staleness: 0,
            shard: Shard::None,
            prefetch: true,
        }
    }
}

impl DistributionCfg {
    pub(super) fn validate(&self, origin: &str) -> Result<()> {
        let d = self;
        super::count(origin, "distribution.check_every", d.check_every as u64, limits::CHECK_EVERY)?;
        super::count(origin, "distribution.autotune_steps", d.autotune_steps as u64, limits::AUTOTUNE_STEPS)?;
        let reals = [
            ("distribution.fusion_threshold_mb", d.fusion_threshold_mb, limits::FUSION_MB),
            ("distribution.first_bucket_mb", d.first_bucket_mb, limits::FUSION_MB),
            ("distribution.watchdog_seconds", d.watchdog_seconds, limits::WATCHDOG_SECONDS),
            ("distribution.stall_seconds", d.stall_seconds, limits::STALL_SECONDS),
            ("distribution.startup_seconds", d.startup_seconds, limits::STARTUP_SECONDS),
            ("distribution.finish_seconds", d.finish_seconds, limits::FINISH_SECONDS),
        ];
        for (field, v, span) in reals {
            real(origin, field, v, span)?;
        }
        if d.hierarchical && (d.compression != Compression::None || d.reduction == Reduction::Adasum) {
            let (field, what) = if d.reduction == Reduction::Adasum {
                ("distribution.reduction", "reduction = \"adasum\"".to_string())
            } else {
                (
                    "distribution.compression",
                    format!("compression = \"{}\"", format!("{:?}", d.compression).to_lowercase()),
                )
            };
            return Err(Error::config(
                origin,
                field,
                format!(
                    "{what} with hierarchical = true: the hierarchical all-reduce sums exact float32 gradients \
                     (reduce in the node, all-reduce among the nodes, broadcast); set hierarchical = false, or \
                     compression = \"none\" and reduction = \"average\""
                ),
            ));
        }
        self.validate_shard(origin)?;
        if d.reduction == Reduction::Adasum && d.compression != Compression::None {
            return Err(Error::config(
                origin,
                "distribution.reduction",
                format!(
                    "\"adasum\" with compression = \"{}\": Adasum combines exact float32 gradients pair by pair; \
                     set compression = \"none\" or reduction = \"average\"",
                    format!("{:?}", d.compression).to_lowercase()
                ),
            ));
        }
        Ok(())
    }
}

impl DistributionCfg {
    /// `shard`'s combinations with the other keys of this table that cannot work.
    fn validate_shard(&self, origin: &str) -> Result<()> {
        let d = self;
        let bad = |field: &str, msg: String| Err(Error::config(origin, field, msg));
        if d.shard == Shard::None {
            return Ok(());
        }
        if d.strategy == Strategy::ParameterServer {
            return bad(
                "distribution.shard",
                format!(
                    "shard = \"{}\" with strategy = \"parameter_server\": the servers already hold the parameters \
                     and the optimizer state, divided among them; set shard = \"none\" or strategy = \"allreduce\"",
                    d.shard.name()
                ),
            );
        }
        if d.autotune {
            return bad(
                "distribution.shard",
                format!(
                    "shard = \"{}\" with autotune = true (distribution.autotune): each rank's part of the optimizer \
                     state is its piece of every fusion bucket, and autotune changes the buckets during the run; set \
                     autotune = false and choose fusion_threshold_mb yourself, or shard = \"none\"",
                    d.shard.name()
                ),
            );
        }
        if d.shard.reduce_scatters() {
            let other = if d.reduction == Reduction::Adasum {
                Some(("distribution.reduction", "reduction = \"adasum\"".to_string()))
            } else if d.hierarchical {
                Some(("distribution.hierarchical", "hierarchical = true".to_string()))
            } else if d.compression != Compression::None {
                Some((
                    "distribution.compression",
                    format!("compression = \"{}\"", format!("{:?}", d.compression).to_lowercase()),
                ))
            } else {
                None
            };
            if let Some((field, what)) = other {
                return bad(
                    "distribution.shard",
                    format!(
                        "shard = \"{}\" with {what} ({field}): the gradients are reduce-scattered as exact \
                         float32 sums (MPI_Reduce_scatter); shard = \"optimizer\" keeps the whole all-reduce and \
                         composes with {what}, or set {field} back to its default",
                        d.shard.name()
                    ),
                );
            }
        }
        Ok(())
    }
}

/// Most servers and the largest bound on staleness a job may ask for.
pub const MAX_SERVERS: usize = 4096;
pub const MAX_STALENESS: i64 = 1_000_000;

impl Job {
    /// `strategy = "parameter_server"`: the checks that need only the job file (the rank count
    /// is checked at start-up, by `roles`).
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
        if self.optimizer.ema.is_some() {
            return bad(
                "optimizer.ema",
                "is not available with strategy = \"parameter_server\" yet (the moving average would have to live \
                 on the servers beside the parameters they update); use strategy = \"allreduce\", or leave \
                 optimizer.ema unset"
                    .into(),
            );
        }
        if self.training.early_stopping.is_some() || self.output.keep_best {
            let field = if self.output.keep_best { "output.keep_best" } else { "training.early_stopping" };
            return bad(
                field,
                "is not available with strategy = \"parameter_server\" yet (the servers would have to stop and hand \
                 over the best weights); use strategy = \"allreduce\", or train for a fixed number of epochs"
                    .into(),
            );
        }
        let o = &self.optimizer;
        if o.schedule == super::Schedule::Plateau {
            return bad(
                "optimizer.schedule",
                "\"plateau\" needs the epoch's metrics where the optimizer runs, and with strategy = \
                 \"parameter_server\" the servers run it without them; choose step, exponential or cosine"
                    .into(),
            );
        }
        if o.warmup_epochs > 0.0 {
            return bad(
                "optimizer.warmup_epochs",
                "counts epochs, and with strategy = \"parameter_server\" the servers count updates without \
                 knowing an epoch's length; give the warm-up in steps with optimizer.warmup_steps"
                    .into(),
            );
        }
        if o.schedule == super::Schedule::Multistep {
            return bad(
                "optimizer.schedule",
                "\"multistep\" counts epochs, and with strategy = \"parameter_server\" the servers count updates \
                 without knowing an epoch's length; give the drops in steps with schedule = \"step\" \
                 (decay_steps, decay_rate)"
                    .into(),
            );
        }
        if matches!(o.schedule, super::Schedule::Cosine | super::Schedule::Polynomial | super::Schedule::OneCycle)
            && o.decay_steps == 0
        {
            return bad(
                "optimizer.decay_steps",
                format!(
                    "must be set for schedule = \"{}\" with strategy = \"parameter_server\" (the servers do not \
                     know the run's length); give the steps of the decay",
                    o.schedule.name()
                ),
            );
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
        if d.autotune {
            return bad(
                "distribution.autotune",
                "tunes the all-reduce's fusion buckets, and strategy = \"parameter_server\" has none (each bucket \
                 goes to its server); remove it or use strategy = \"allreduce\""
                    .to_string(),
            );
        }
        if d.reduction == Reduction::Adasum {
            return bad(
                "distribution.reduction",
                "\"adasum\" combines the ranks' gradients with each other, and with strategy = \"parameter_server\" \
                 each worker's gradient goes to the servers alone; use strategy = \"allreduce\" or reduction = \
                 \"average\""
                    .to_string(),
            );
        }
        if let Some(w) = self.model.layers.windows(2).find(|p| p[0] as u64 * p[1] as u64 > i32::MAX as u64) {
            return bad(
                "model.layers",
                format!(
                    "a {}×{} weight has over 2^31 - 1 elements, and with strategy = \"parameter_server\" each bucket \
                     travels as one MPI message, whose count is 32-bit; use strategy = \"allreduce\" (its buffers \
                     travel in pieces) or narrower layers",
                    w[0], w[1]
                ),
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
        for (field, v) in [
            ("parallel.pipeline", self.parallel.pipeline),
            ("parallel.micro_batches", self.parallel.micro_batches),
            ("training.accumulate", self.training.accumulate),
        ] {
            if v > 1 {
                return bad(
                    field,
                    format!(
                        "{field} = {v}: pipeline stages, micro-batches and gradient accumulation are not available \
                         with strategy = \"parameter_server\" (a worker pushes the gradients of one batch per step); use \
                         1 or strategy = \"allreduce\""
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
        let huge =
            |s: &str| Job::parse("job", "[data]\ntrain='x'\n[model]\nlayers=[65536,32768,2]\n", &[s.to_string()]);
        assert!(huge("distribution.strategy='allreduce'").is_ok(), "2^31 elements in one weight, in pieces");
        assert_eq!(field(huge("distribution.strategy='parameter_server'")), "model.layers");
        assert_eq!(roles(&parse(&[ps, "distribution.servers=2"]).unwrap(), 5).unwrap(), (3, 2));
        assert!(roles(&parse(&[ps]).unwrap(), 1).is_err());
    }

    #[test]
    fn shard_parses_and_refuses_what_cannot_work() {
        assert_eq!(parse(&[]).unwrap().distribution.shard, Shard::None);
        for (v, s) in
            [("optimizer", Shard::Optimizer), ("gradients", Shard::Gradients), ("parameters", Shard::Parameters)]
        {
            assert_eq!(parse(&[&format!("distribution.shard={v}")]).unwrap().distribution.shard, s);
        }
        assert_eq!(field(parse(&["distribution.shard=everything"])), "distribution.shard");
        let msg = |r: Result<Job>| r.err().map(|e| e.to_string()).unwrap_or_default();
        let ps = "distribution.strategy=parameter_server";
        for mode in ["optimizer", "parameters"] {
            let e = msg(parse(&[&format!("distribution.shard={mode}"), ps]));
            assert!(e.contains("distribution.shard") && e.contains("parameter_server"), "{e}");
        }
        for other in
            ["distribution.compression=fp16", "distribution.reduction=adasum", "distribution.hierarchical=true"]
        {
            let key = other.split('=').next().unwrap();
            for mode in ["gradients", "parameters"] {
                let e = msg(parse(&[&format!("distribution.shard={mode}"), other]));
                assert!(e.contains("distribution.shard") && e.contains(key) && e.contains(mode), "{other}: {e}");
            }
            assert!(parse(&["distribution.shard=optimizer", other]).is_ok(), "{other} composes with optimizer");
        }
        for kind in ["lars", "lamb"] {
            for mode in ["optimizer", "gradients", "parameters"] {
                assert!(parse(&[&format!("distribution.shard={mode}"), &format!("optimizer.kind='{kind}'")]).is_ok());
            }
        }
        assert!(parse(&["distribution.shard=gradients", "optimizer.kind='adamw'", "parallel.tensor=2"]).is_ok());
        let e = msg(parse(&["distribution.shard=optimizer", "distribution.autotune=true"]));
        assert!(e.contains("distribution.shard") && e.contains("distribution.autotune"), "{e}");
    }
}
