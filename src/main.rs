//! hvtrain: parse the command line, start MPI when the command needs it, run, and decide
//! the exit code. This is the only place that does the last two: an error on any rank is
//! printed once (naming the rank) and ends the whole MPI job with MPI_Abort, so no rank is
//! ever left waiting in a collective.
//!
//! Must not: hold logic a test would want to call (it parses, dispatches and exits).

// Clippy, style lints this code base declines: a list of ranges may hold one range (a rank's
// pieces, a shard's rows) and stays a list; `!(a <= b)` is meant where NaN must take the
// failing side; tuple types of a few parts read better in place than behind an alias.
#![allow(clippy::single_range_in_vec_init, clippy::neg_cmp_op_on_partial_ord, clippy::type_complexity)]

mod bench;
mod checkpoint;
mod cli;
mod config;
mod conformance;
mod data;
mod device;
mod error;
mod eval;
mod export;
mod fault;
mod mem;
mod metrics;
mod model;
mod optim;
mod parallel;
mod plot;
mod python;
mod rng;
mod signals;
mod step;
mod sweep;
mod sys;
mod train;
mod weights;

use clap::Parser;
use cli::{BenchCommand, CheckpointCommand, Cli, Command, DataCommand};
use std::io::Write;
use std::time::Instant;

#[global_allocator]
static ALLOC: mem::Guarded = mem::Guarded;

fn init_logging() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format(|buf, rec| {
            let ts = buf.timestamp_millis();
            writeln!(buf, "[{ts} {} rank {}] {}", rec.level(), sys::rank_tag(), rec.args())
        })
        .init();
}

fn main() {
    let t_process = Instant::now();
    let cli = Cli::parse();
    init_logging();
    // One thread per process's products unless a job says otherwise (`limits` below), set
    // before any other thread exists.
    device::set_cpu_threads(1);
    std::panic::set_hook(Box::new(|info| {
        sys::say(format!("hvtrain: internal error on rank {}: {info}", sys::rank_tag()));
        parallel::comm::abort_world(101);
    }));

    let code = match cli.command {
        Command::Data(DataCommand::Check { file }) => match data::inspect::check_file(&file) {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                sys::say(format!("hvtrain: error: {e}"));
                1
            }
        },
        Command::Data(cmd) => finish(run_data(cmd)),
        Command::Checkpoint(CheckpointCommand::Check { path }) => match checkpoint::inspect::check(&path) {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                sys::say(format!("hvtrain: error: {e}"));
                1
            }
        },
        Command::Checkpoint(CheckpointCommand::Average { paths, last, output }) => finish(
            checkpoint::average::inputs(&paths, last.map(|n| n as usize))
                .and_then(|files| checkpoint::average::average(&files, &output)),
        ),
        Command::Predict { job, weights, input, output, fill, keep, threshold, no_header, delimiter } => finish(
            config::Job::load_with_env(&job.job, &job.set)
                .and_then(|(j, _)| {
                    // One process: training.threads ("auto": every usable core, or OMP_NUM_THREADS).
                    device::set_job_threads(j.training.threads);
                    let delimiter = data::import::delimiter_arg(delimiter)?;
                    let opts = eval::PredictOptions { fill, keep, threshold, no_header, delimiter };
                    eval::predict(&j, &weights, &input, &output, &opts)
                })
                .map(|n| log::info!("wrote {} predictions to {}", n, output.display())),
        ),
        Command::Export { job, weights, format: cli::ExportFormat::Onnx, output, probabilities } => finish(
            config::Job::load_with_env(&job.job, &job.set)
                .and_then(|(j, _)| export::export(&j, &weights, &output, probabilities))
                .map(|e| {
                    log::info!(
                        "wrote {} ({} bytes, ONNX opset {}): MLP {:?}, {} nodes",
                        output.display(),
                        e.bytes,
                        export::OPSET,
                        e.layers,
                        e.nodes
                    )
                }),
        ),
        Command::Bench(BenchCommand::Allreduce {
            min_bytes,
            max_bytes,
            threshold_mb,
            seconds,
            reduction,
            hierarchical,
        }) => {
            let defaults = config::DistributionCfg::default();
            with_mpi(Limits { startup: None, finish: defaults.finish_seconds }, |comm| {
                parallel::liveness::set("bench allreduce");
                bench::allreduce::run(
                    comm,
                    min_bytes,
                    max_bytes,
                    threshold_mb,
                    seconds,
                    reduction.reduction(),
                    hierarchical,
                );
                Ok(0)
            })
        }
        Command::Bench(BenchCommand::Pieces { elements }) => {
            let defaults = config::DistributionCfg::default();
            with_mpi(Limits { startup: None, finish: defaults.finish_seconds }, |comm| {
                parallel::liveness::set("bench pieces");
                bench::pieces::run(comm, elements).map(|()| 0)
            })
        }
        Command::Bench(BenchCommand::Step {
            device,
            layers,
            batch,
            precision,
            activation,
            steps,
            warmup,
            threads,
            data,
            json,
        }) => {
            device::set_cpu_threads(threads);
            device::check_cpu_threads(device::Kind::Cpu, threads);
            let resident = data == cli::DataArg::Device;
            let b = bench::step::StepBench {
                layers,
                batch,
                steps,
                warmup,
                precision: precision.precision(),
                activation,
                resident,
            };
            finish(bench_step(device, b, json))
        }
        Command::Selftest { device } => selftest(device),
        Command::Plot { runs, output } => {
            finish(plot::plot(&runs, output.as_deref()).map(|p| println!("hvtrain plot: wrote {}", p.display())))
        }
        Command::Bench(BenchCommand::Gemm { layers, batch, seconds, precision, threads }) => {
            device::set_cpu_threads(threads);
            device::check_cpu_threads(device::Kind::Cpu, threads);
            finish(bench::gemm::run(&layers, batch, seconds, precision.precision(), threads))
        }
        Command::Train(args) => {
            let limits = limits(&args.job.job, &args.job.set);
            // A stop request during start-up is kept for the first step boundary (75 there).
            if let Err(e) = signals::handlers() {
                sys::say(format!("hvtrain: error: {}", error::Error::Signal(e)));
                std::process::exit(1);
            }
            with_mpi(limits, |comm| train(comm, args, t_process))
        }
        Command::LrFind { job, min, max, steps } => with_mpi(limits(&job.job, &job.set), |comm| {
            let (j, _) = config::Job::load_with_env(&job.job, &job.set)?;
            let j = train::lr_find::job(&j, config::LrFind { min, max, steps })?;
            if comm.rank == 0 {
                log::info!(
                    "lr-find: the learning rate from {min:.1e} to {max:.1e} over {steps} steps (global batch as the job's); \
                     outputs in {}",
                    j.output.dir
                );
            }
            train::train(comm, &j, t_process, None).map(|_| 0)
        }),
        Command::Sweep(args) if args.dry_run => {
            finish(sweep::dry_run(&args.job.job, &args.job.set).map(|text| println!("{text}")))
        }
        Command::Sweep(args) => {
            let limits = limits(&args.job.job, &args.job.set);
            if let Err(e) = signals::handlers() {
                sys::say(format!("hvtrain: error: {}", error::Error::Signal(e)));
                std::process::exit(1);
            }
            with_mpi(limits, |comm| {
                signals::install().map_err(error::Error::Signal)?;
                match sweep::sweep(comm, &args.job.job, &args.job.set, t_process, args.resume.is_some())? {
                    train::Outcome::Preempted => Ok(signals::EXIT_PREEMPTED),
                    _ => Ok(0),
                }
            })
        }
        Command::Wait { job, seconds, since } => wait(&job, seconds, since),
        Command::Eval { job, weights, curves } => with_mpi(limits(&job.job, &job.set), |comm| {
            let (j, _) = config::Job::load_with_env(&job.job, &job.set)?;
            eval::eval(comm, &j, &weights, curves.as_deref()).map(|()| 0)
        }),
    };
    std::process::exit(code);
}

/// `hvtrain train` on `comm`: the job (environment and --timeline applied), signals, the run.
fn train(comm: &parallel::Comm, args: cli::TrainArgs, t_process: Instant) -> error::Result<i32> {
    let mut sets = args.job.set.clone();
    if let Some(t) = &args.timeline {
        sets.push(format!("output.timeline={:?}", t.display().to_string()));
    }
    let (job, env) = config::Job::load_with_env(&args.job.job, &sets)?;
    if comm.rank == 0 && !env.is_empty() {
        log::info!("from the environment: {}", env.join(" "));
    }
    signals::install().map_err(error::Error::Signal)?;
    if comm.rank == 0 {
        if let Some(w) = signals::launcher_under_timeout() {
            log::warn!("{w}");
        }
    }
    match train::train(comm, &job, t_process, args.resume.as_deref().map(train::Resume::parse))? {
        train::Outcome::Completed | train::Outcome::Paused => Ok(0),
        train::Outcome::Preempted => Ok(signals::EXIT_PREEMPTED),
    }
}

/// How long a rank stopped by a signal waits in MPI_Finalize before it exits all the same.
const STOPPED_FINALIZE_SECONDS: f64 = 2.0;

/// The job's limits on the waits around MPI (read before MPI_Init): start-up and the end.
struct Limits {
    startup: Option<f64>,
    finish: f64,
}

/// `distribution.startup_seconds` and `finish_seconds` of the job, or their defaults when the
/// job does not load (its error is reported after MPI_Init). Also sets the job's
/// `training.threads`, which must be in place before MPI_Init starts threads.
fn limits(job: &str, sets: &[String]) -> Limits {
    let j = config::Job::load_with_env(job, sets).map(|(j, _)| j).ok();
    device::set_job_threads(j.as_ref().map_or(config::Threads::Fixed(1), |j| j.training.threads));
    let d = j.map(|j| j.distribution).unwrap_or_default();
    Limits { startup: Some(d.startup_seconds), finish: d.finish_seconds }
}

/// The end, after every output is written: the `finish` fault point, the final handshake and
/// MPI_Finalize, each bounded by `secs` (`parallel::finish`): a rank that does not finish ends
/// the job with exit code 5 instead of holding the others for ever.
fn end(comm: parallel::Comm, beacon: Option<parallel::comm::Beacon>, secs: f64, code: i32) {
    if let Err(e) = fault::point(fault::At::Finish) {
        sys::say(format!("hvtrain: error: {e}"));
    }
    if let Some(b) = &beacon {
        if let Err(line) = parallel::finish::handshake(b, &comm.host, secs) {
            sys::say(line);
            parallel::comm::abort_world(parallel::finish::EXIT_HUNG_AT_EXIT);
        }
    }
    drop(beacon);
    if code == signals::EXIT_PREEMPTED {
        // Stopped by a signal: `mpirun`, signalled too, is tearing the job down and takes no
        // part in MPI_Finalize until it has killed its ranks (after odls_base_sigkill_timeout).
        // Every output is complete: do not wait long for it.
        let secs = secs.min(STOPPED_FINALIZE_SECONDS);
        parallel::startup::arm_line(
            secs,
            &parallel::finish::stopped_finalize_line(comm.rank, &comm.host, secs, code),
            code,
        );
    } else {
        parallel::startup::arm_line(
            secs,
            &parallel::finish::finalize_line(comm.rank, &comm.host, secs),
            parallel::finish::EXIT_HUNG_AT_EXIT,
        );
    }
    drop(comm); // finalizes MPI
    parallel::startup::disarm();
}

/// Run `f` inside MPI. On error: print one line naming the rank and host, then abort the
/// whole job (MPI_Abort) when there are other ranks to take down. `startup`: the start-up
/// limit in seconds (`parallel::startup`), from before MPI_Init until the heartbeats run.
fn with_mpi(limits: Limits, f: impl FnOnce(&parallel::Comm) -> error::Result<i32>) -> i32 {
    parallel::startup::phase("MPI_Init");
    if let Some(secs) = limits.startup {
        parallel::startup::arm(secs);
    }
    if let Err(e) = fault::at_init() {
        sys::say(format!("hvtrain: error: {e}"));
        return 1;
    }
    let comm = match parallel::Comm::init() {
        Ok(c) => c,
        Err(e) => {
            sys::say(format!("hvtrain: error: MPI start-up failed: {e}"));
            return 1;
        }
    };
    sys::set_rank(comm.rank);
    parallel::startup::phase("the communicator set-up");
    // Heartbeats from here to the end, so that a rank stopped or gone at any point ends the job.
    let live = parallel::liveness::Liveness::start(&comm);
    parallel::startup::disarm();
    match f(&comm) {
        Ok(code) => {
            // Waits, still heartbeating, until every rank is done: every output is written.
            let beacon = live.and_then(|l| l.finish());
            end(comm, beacon, limits.finish, code);
            code
        }
        Err(e) => {
            sys::say(format!("hvtrain: error on rank {} ({}): {e}", comm.rank, comm.host));
            if comm.size > 1 {
                comm.abort(1);
            }
            1
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn bench_step(
    device: cli::DeviceArg,
    b: bench::step::StepBench,
    json: Option<std::path::PathBuf>,
) -> error::Result<()> {
    if b.layers.len() < 2 || b.layers.contains(&0) || b.batch == 0 || b.steps == 0 {
        return Err(error::Error::Device(
            "bench step: --layers needs two or more sizes > 0, --batch and --steps > 0".into(),
        ));
    }
    let (kind, how) = device::select(device.choice(), 0)?;
    log::info!("bench step on {how}");
    let out = device::with_backend(kind, b.precision, &b)?;
    println!("{out}");
    if let Some(p) = json {
        std::fs::write(&p, format!("{out}\n")).map_err(|e| error::Error::io(&p, "writing the benchmark result", e))?;
    }
    Ok(())
}

/// `hvtrain wait`: until rank 0 of the job's run lets go of its lock; its outcome as the
/// exit code (`train::runlock::Waited::code`).
fn wait(job: &cli::JobArgs, seconds: f64, since: Option<u64>) -> i32 {
    let dir = match config::Job::load_with_env(&job.job, &job.set) {
        Ok((j, _)) => std::path::PathBuf::from(j.output.dir),
        Err(e) => {
            sys::say(format!("hvtrain: error: {e}"));
            return 1;
        }
    };
    if !(seconds.is_finite() && seconds >= 0.0) {
        sys::say(format!("hvtrain: error: wait --seconds must be a number of seconds >= 0, not {seconds}"));
        return 2;
    }
    match train::runlock::wait(&dir, seconds, since) {
        Ok(w) => {
            let line = match &w {
                train::runlock::Waited::NoRun => format!("no run of this launch in {}", dir.display()),
                train::runlock::Waited::Gone(s) => format!("rank 0 has ended ({s})"),
                train::runlock::Waited::TimedOut(s) => {
                    format!("rank 0 still running after {seconds:.0} s ({s}); its checkpoint may be incomplete")
                }
            };
            sys::say(format!("hvtrain wait: {line}: exit {}", w.code()));
            w.code()
        }
        Err(e) => {
            sys::say(format!("hvtrain: error: {e}"));
            1
        }
    }
}

/// `hvtrain selftest`: exit 0 when every check passed.
fn selftest(device: cli::DeviceArg) -> i32 {
    match conformance::selftest(device.choice()) {
        Ok(true) => {
            println!("selftest: all checks passed");
            0
        }
        Ok(false) => {
            println!("selftest: FAILED");
            1
        }
        Err(e) => {
            sys::say(format!("hvtrain: error: {e}"));
            1
        }
    }
}

fn finish(r: error::Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            sys::say(format!("hvtrain: error: {e}"));
            1
        }
    }
}

fn run_data(cmd: DataCommand) -> error::Result<()> {
    match cmd {
        DataCommand::ImportIdx { images, labels, out } => {
            let (n, d) = data::convert::import_idx(&images, &labels, &out)?;
            log::info!("wrote {}: x float32 [{n}, {d}], y int32 [{n}]", out.display());
        }
        DataCommand::Import {
            input,
            out,
            y,
            y_file,
            regression,
            fill,
            no_header,
            delimiter,
            shard,
            compress,
            classes_from,
            classes,
            class_order,
            sample_weight,
            features_only,
            drop,
            columns_from,
            one_hot,
        } => {
            let classes = match (classes_from, classes, class_order) {
                (Some(f), _, _) => data::import::classes_from(&f)?,
                (None, Some(list), _) => data::import::classes_list(&list)?,
                (None, None, cli::ClassOrderArg::Sorted) => data::import::ClassOrder::Sorted,
                (None, None, cli::ClassOrderArg::Appearance) => data::import::ClassOrder::Appearance,
            };
            let delimiter = data::import::delimiter_arg(delimiter)?;
            let o = data::import::Opts {
                y,
                y_file,
                regression,
                fill,
                no_header,
                delimiter,
                shard,
                compress,
                classes,
                sample_weight,
                features_only,
                drop,
                select: columns_from.as_deref().map(data::import::columns_from).transpose()?,
                select_from: columns_from.map(|p| p.display().to_string()),
                one_hot,
            };
            let s = data::import::import(&input, &out, &o)?;
            let y = match s.y {
                data::import::sink::YKind::Classes if s.classes.is_empty() => "int32 [N] class labels".to_string(),
                data::import::sink::YKind::Classes => format!("int32 [N] classes {:?} (y_classes)", s.classes),
                data::import::sink::YKind::Values(k) => format!("float32 [N, {k}] targets"),
                data::import::sink::YKind::None => "none (--features-only: rows for hvtrain predict)".to_string(),
            };
            let (w, key) = if s.weights {
                let w = data::import::sink::WEIGHTS;
                (format!(", {w} float32 [{}] sample weights", s.rows), format!(", sample_weight = \"{w}\""))
            } else {
                (String::new(), String::new())
            };
            if s.y == data::import::sink::YKind::None {
                log::info!(
                    "wrote x float32 [{}, {}], y {y}: hvtrain predict JOB --weights W --input {} --output P",
                    s.rows,
                    s.features,
                    s.template
                );
            } else {
                log::info!(
                    "wrote x float32 [{}, {}], y {y}{w}; in a job file: train = \"{}\"{key}",
                    s.rows,
                    s.features,
                    s.template
                );
            }
        }
        DataCommand::Check { .. } => unreachable!("handled in main"),
        DataCommand::Shard { input, parts, out, x, y } => {
            let paths = data::convert::shard(&input, parts, &out, &x, &y)?;
            let stem = input.file_stem().and_then(|s| s.to_str()).unwrap_or("part");
            log::info!(
                "wrote {} shards; in a job file use: train = \"{}\"",
                paths.len(),
                out.join(format!("{stem}-{{rank}}.h5")).display()
            );
        }
    }
    Ok(())
}
