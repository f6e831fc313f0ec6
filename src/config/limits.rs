//! The bounds of every numeric field, checked by `validate` (and, for the HVTRAIN_*
//! variables, by `env`). Durations are bounded so that they convert to `Duration`s without
//! overflow and are longer than the granularity they are checked at; counts so that no
//! allocation or MPI count derived from them can overflow.
//!
//! Must not: hold defaults (each table's file does) or check anything itself.

/// The allowed values of a numeric field: from `lo` to `hi`, each end included unless
/// `lo_open` / `hi_open`; 0 is allowed too when `off` (0 meaning "off"). NaN never is.
#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub lo: f64,
    pub lo_open: bool,
    pub hi: f64,
    pub hi_open: bool,
    pub off: bool,
    pub unit: &'static str,
}

impl Span {
    pub const fn new(lo: f64, hi: f64, unit: &'static str) -> Span {
        Span { lo, lo_open: false, hi, hi_open: false, off: false, unit }
    }
    /// As `new`, with 0 also allowed, meaning off.
    pub const fn or_off(lo: f64, hi: f64, unit: &'static str) -> Span {
        Span { off: true, ..Span::new(lo, hi, unit) }
    }
    /// Greater than `lo`, at most `hi`.
    pub const fn above(lo: f64, hi: f64) -> Span {
        Span { lo_open: true, ..Span::new(lo, hi, "") }
    }
    /// At least `lo`, less than `hi`.
    pub const fn below(lo: f64, hi: f64) -> Span {
        Span { hi_open: true, ..Span::new(lo, hi, "") }
    }

    pub fn allows(&self, v: f64) -> bool {
        let above_lo = if self.lo_open { v > self.lo } else { v >= self.lo };
        let below_hi = if self.hi_open { v < self.hi } else { v <= self.hi };
        (self.off && v == 0.0) || (above_lo && below_hi)
    }

    /// "at least 1 and at most 3600 seconds without a heartbeat", "0 (off) or ...".
    pub fn describe(&self) -> String {
        let unit = if self.unit.is_empty() { String::new() } else { format!(" {}", self.unit) };
        let lo =
            if self.lo_open { format!("greater than {}", num(self.lo)) } else { format!("at least {}", num(self.lo)) };
        let hi = if self.hi_open { format!("less than {}", num(self.hi)) } else { format!("at most {}", num(self.hi)) };
        let range = format!("{lo} and {hi}{unit}");
        if self.off {
            format!("0 (off) or {range}")
        } else {
            range
        }
    }

    /// The message for a value outside: "must be at least 1 and at most 1000000, got 0".
    pub fn error(&self, got: &str) -> String {
        format!("must be {}, got {got}", self.describe())
    }
}

/// A number as a person writes it: 0.1, 604800, 1e20, 2e-5.
pub fn num(v: f64) -> String {
    if v != 0.0 && v.is_finite() && (v.abs() >= 1e9 || v.abs() < 1e-4) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// A year: the longest duration any field accepts.
pub const YEAR_S: f64 = 365.0 * 24.0 * 3600.0;
pub const EPOCHS: Span = Span::new(1.0, 1e6, "");
pub const BATCH_SIZE: Span = Span::new(1.0, 1_048_576.0, "samples per rank");
pub const ACCUMULATE: Span = Span::new(1.0, 65536.0, "micro-batches per optimizer step");
pub const THREADS: Span = Span::new(1.0, 64.0, "threads per rank");
pub const LOG_EVERY: Span = Span::or_off(1.0, 1e9, "steps");
/// `output.histogram_freq`: 0 (off) or every 1 to a million epochs.
pub const HISTOGRAM_FREQ: Span = Span::or_off(1.0, 1e6, "epochs");
pub const PROGRESS_SECONDS: Span = Span::or_off(0.001, YEAR_S, "seconds");
pub const LR: Span = Span::above(0.0, 1e30);
pub const MOMENTUM: Span = Span::below(0.0, 1.0);
pub const BETA: Span = Span::below(0.0, 1.0);
/// `optimizer.ema`'s β: 0 would be the parameters themselves, 1 the starting ones forever.
pub const EMA: Span = Span { lo_open: true, ..Span::below(0.0, 1.0) };
pub const EPS: Span = Span::new(1e-30, 1.0, "");
pub const WEIGHT_DECAY: Span = Span::new(0.0, 1000.0, "");
pub const CLIPNORM: Span = Span::above(0.0, 1e30);
pub const TRUST: Span = Span::above(0.0, 1e6);
pub const POWER: Span = Span::above(0.0, 100.0);
pub const WARMUP_STEPS: Span = Span::or_off(1.0, 1e9, "steps");
pub const WARMUP_EPOCHS: Span = Span::new(0.0, 1e6, "epochs (0: off)");
/// `optimizer.schedule`'s parameters.
pub const DECAY_STEPS: Span = Span::or_off(1.0, 1e12, "steps");
pub const DECAY_RATE: Span = Span::above(0.0, 1.0);
pub const T_MUL: Span = Span::new(1.0, 1000.0, "");
pub const M_MUL: Span = Span::above(0.0, 1.0);
pub const PCT_START: Span = Span { lo: 0.0, lo_open: true, hi: 1.0, hi_open: true, off: false, unit: "" };
pub const DIV_FACTOR: Span = Span::new(1.0, 1e12, "");
pub const PLATEAU_FACTOR: Span = Span { lo: 0.0, lo_open: true, hi: 1.0, hi_open: true, off: false, unit: "" };
pub const MIN_LR: Span = Span::below(0.0, 1e30);
pub const MIN_DELTA: Span = Span::new(0.0, 1e30, "");
pub const PATIENCE: Span = Span::new(1.0, 1e6, "epochs");
pub const COOLDOWN: Span = Span::new(0.0, 1e6, "epochs");
/// A bucket of 8192 MiB holds 2^31 float32: MPI's element count limit.
pub const FUSION_MB: Span = Span::new(0.0, 8192.0, "MiB");
/// Seconds without a heartbeat before a rank is taken for dead. Heartbeats go out once a
/// second, so less than 1 s would call healthy ranks dead; more than an hour is no
/// longer a failure detector.
pub const WATCHDOG_SECONDS: Span = Span::new(1.0, 3600.0, "seconds without a heartbeat");
/// Seconds without progress on any rank before the job is ended as stalled (a week at most).
pub const STALL_SECONDS: Span = Span::new(1.0, 604_800.0, "seconds without progress");
/// Seconds from the process's start to the heartbeats (a day at most).
pub const STARTUP_SECONDS: Span = Span::new(1.0, 86_400.0, "seconds of start-up");
pub const FINISH_SECONDS: Span = Span::new(1.0, 86_400.0, "seconds of the end");
pub const CHECK_EVERY: Span = Span::or_off(1.0, 1e9, "steps");
/// Steps timed per autotune candidate (the first of each is not counted: new buckets).
pub const AUTOTUNE_STEPS: Span = Span::new(3.0, 10_000.0, "steps per candidate");
pub const EVERY_STEPS: Span = Span::or_off(1.0, 1e12, "steps");
/// 2e-5 minutes is 1.2 ms.
pub const EVERY_MINUTES: Span = Span::or_off(2e-5, YEAR_S / 60.0, "minutes");
pub const RANKS_PER_TRIAL: Span = Span::new(1.0, 1_048_576.0, "ranks per trial");
pub const ETA: Span = Span::new(2.0, 100.0, "(the reduction factor)");
pub const TRIALS: Span = Span::new(0.0, 1e6, "trials (0: the default)");
pub const KEEP: Span = Span::new(0.0, 1e6, "checkpoints (0 is taken as 1)");
pub const SHUFFLE_BLOCK: Span = Span::new(1.0, 1_048_576.0, "rows");
/// The largest |data.x_scale| and |data.x_offset|: beyond it, ordinary stored values
/// overflow float32.
pub const X_AFFINE_MAX: f64 = 1e30;
pub const SHUFFLE_WINDOW: Span = Span::new(1.0, 16_777_216.0, "rows");
/// `[parallel]`: ranks per tensor group, pipeline stages, micro-batches per step.
pub const TENSOR: Span = Span::new(1.0, 4096.0, "ranks per tensor group");
pub const PIPELINE: Span = Span::new(1.0, 1024.0, "stages");
pub const MICRO_BATCHES: Span = Span::new(1.0, 65536.0, "micro-batches per step");
/// Widths in `model.layers`: (fewest, most).
pub const LAYER_COUNT: (u64, u64) = (2, 1024);
pub const LAYER_WIDTH: (u64, u64) = (1, 16_777_216);
/// Parameters in the whole model: 2^40 (4 TiB of float32 parameters), beyond any machine's
/// memory. MPI's 32-bit counts do not bound it: longer buffers travel in pieces
/// (`parallel::comm::piece`).
pub const MAX_PARAMS: u64 = 1 << 40;
