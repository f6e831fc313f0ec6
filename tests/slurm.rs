//! The batch scripts in jobs/ under a real single-node Slurm (Debian's slurm-wlm and munge,
//! run as root with all state in a temporary directory; tests/slurm/start.sh, stop.sh):
//! sbatch jobs/cpu.sbatch with srun (PMIx) and with mpirun, 2 ranks, each rank's placement
//! line and `done:` in the output, state COMPLETED, exit 0; scancel makes the ranks
//! checkpoint and the job end with exit code 75 (no requeue); the time-limit warning
//! (USR1 to the batch shell) checkpoints, requeues, and the requeued run resumes;
//! jobs/gpu-node.sbatch on a node with two pretend GPUs; jobs/multi-node.sbatch on one node.
//! Every wait is bounded; the daemons are stopped at the end, also when a case fails.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const D: usize = 8;
/// Private cluster state: a short path (the munge socket path must fit in 108 bytes).
const STATE: &str = "/tmp/hvtrain-slurm-test";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn installed(prog: &str) -> bool {
    let path = std::env::var("PATH").unwrap_or_default() + ":/usr/sbin:/sbin";
    path.split(':').any(|d| Path::new(d).join(prog).is_file())
}

/// The running private Slurm; stopping it (cancelling its jobs first) on drop, so a failed
/// assertion still leaves no daemon behind.
struct Slurm {
    state: PathBuf,
}

impl Slurm {
    fn start() -> Slurm {
        let missing: Vec<_> = ["munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol"]
            .into_iter()
            .filter(|p| !installed(p))
            .collect();
        if !missing.is_empty() {
            let how =
                "install Debian's slurm-wlm and munge (apt-get install slurm-wlm munge; `make test` installs them)";
            if std::env::var_os("CI").is_some() {
                panic!("Slurm is not installed in CI ({missing:?} not found): {how}");
            }
            panic!("Slurm is not installed here ({missing:?} not found), so the batch scripts in jobs/ cannot be tested: {how}");
        }
        let uid = Command::new("id").arg("-u").output().unwrap().stdout;
        assert_eq!(
            String::from_utf8_lossy(&uid).trim(),
            "0",
            "the private Slurm runs its daemons as root: run this test as root"
        );
        let state = PathBuf::from(STATE);
        // Daemons left by an earlier run that was killed before it could clean up.
        let _ = Command::new("timeout")
            .args(["-k", "5", "40"])
            .arg(repo().join("tests/slurm/stop.sh"))
            .arg(&state)
            .status();
        let _ = std::fs::remove_dir_all(&state);
        let port = std::env::var("SLURM_TEST_PORT").unwrap_or_else(|_| "16817".into());
        let out = Command::new("timeout")
            .args(["-k", "5", "45"])
            .arg(repo().join("tests/slurm/start.sh"))
            .args([state.to_str().unwrap(), "4"])
            .env("SLURM_TEST_PORT", port)
            .output()
            .unwrap();
        let s = Slurm { state };
        assert!(
            out.status.success(),
            "starting Slurm failed ({:?}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        s
    }

    /// A Slurm client command (sbatch, scontrol, ...) pointed at this cluster, bounded by `timeout`.
    fn cmd(&self, prog: &str, args: &[&str]) -> (bool, String) {
        let out = Command::new("timeout")
            .args(["-k", "2", "20", prog])
            .args(args)
            .env("SLURM_CONF", self.state.join("slurm.conf"))
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("RUST_LOG", "info")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    }

    /// `sbatch` a script from jobs/ in `dir`, with sbatch options and HVTRAIN_* settings; the job id.
    fn submit(&self, script: &str, dir: &Path, opts: &[&str], env: &[(&str, &str)]) -> String {
        let mut export = "ALL".to_string();
        for (k, v) in [("HVTRAIN_BIN", BIN), ("HVTRAIN_JOB", "job.toml")].iter().chain(env) {
            // sbatch --export splits on commas; values here have none.
            export += &format!(",{k}={v}");
        }
        let mut args = vec!["--parsable".to_string(), format!("--chdir={}", dir.display())];
        args.push(format!("--output={}/slurm-%j.out", dir.display()));
        args.push(format!("--export={export}"));
        args.extend(opts.iter().map(|s| s.to_string()));
        args.push(repo().join("jobs").join(script).display().to_string());
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, out) = self.cmd("sbatch", &a);
        assert!(ok, "sbatch {script}: {out}");
        out.trim().split(';').next().unwrap().to_string()
    }

    /// (JobState, ExitCode, Restarts) from `scontrol show job`.
    fn job(&self, id: &str) -> (String, String, String) {
        let (_, out) = self.cmd("scontrol", &["show", "job", "-o", id]);
        let field =
            |k: &str| out.split_whitespace().find_map(|w| w.strip_prefix(&format!("{k}="))).unwrap_or("?").to_string();
        (field("JobState"), field("ExitCode"), field("Restarts"))
    }

    /// Wait (at most `limit_s`) until the job has ended; its state and exit code.
    fn wait_end(&self, id: &str, limit_s: u64) -> (String, String) {
        let t = Instant::now();
        loop {
            let (state, code, _) = self.job(id);
            if [
                "COMPLETED",
                "FAILED",
                "CANCELLED",
                "TIMEOUT",
                "NODE_FAIL",
                "OUT_OF_MEMORY",
                "PREEMPTED",
                "BOOT_FAIL",
                "DEADLINE",
            ]
            .contains(&state.as_str())
            {
                return (state, code);
            }
            assert!(
                t.elapsed() < Duration::from_secs(limit_s),
                "job {id} still {state} after {limit_s} s\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn logs(&self) -> String {
        let tail = |f: &str| {
            let t = std::fs::read_to_string(self.state.join("log").join(f)).unwrap_or_default();
            let lines: Vec<_> = t.lines().collect();
            format!("--- {f}\n{}", lines[lines.len().saturating_sub(15)..].join("\n"))
        };
        tail("slurmctld.log") + "\n" + &tail("slurmd.log")
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let _ = Command::new("timeout")
            .args(["-k", "5", "40"])
            .arg(repo().join("tests/slurm/stop.sh"))
            .arg(&self.state)
            .status();
    }
}

fn output(dir: &Path, id: &str) -> String {
    std::fs::read_to_string(dir.join(format!("slurm-{id}.out"))).unwrap_or_default()
}

/// Wait (at most `limit_s`) until the job's output contains `what` `times` times.
/// Once job `id` has done its first step on `started` ranks (or trials), `scancel` it; it must
/// end CANCELLED with exit code 75 (stopped with a checkpoint). Its output.
fn cancel_when_training(s: &Slurm, dir: &Path, id: &str, started: usize) -> String {
    wait_output(s, dir, id, "first step done", started, 30);
    std::thread::sleep(Duration::from_millis(500));
    let (ok, msg) = s.cmd("scancel", &[id]);
    assert!(ok, "scancel: {msg}");
    let (state, code) = s.wait_end(id, 30);
    let out = output(dir, id);
    assert_eq!((state.as_str(), code.as_str()), ("CANCELLED", "75:0"), "{out}");
    out
}

fn wait_output(s: &Slurm, dir: &Path, id: &str, what: &str, times: usize, limit_s: u64) {
    let t = Instant::now();
    while output(dir, id).matches(what).count() < times {
        assert!(
            t.elapsed() < Duration::from_secs(limit_s),
            "job {id}: no {what:?} (x{times}) after {limit_s} s; state {:?}\n{}\n{}",
            s.job(id),
            output(dir, id),
            s.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Both ranks' placement lines, on this host, with their local ranks.
fn assert_placement(out: &str, ranks: usize) {
    let host = String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout).unwrap();
    for r in 0..ranks {
        let line = format!("rank {r}/{ranks} on host {} (local rank {r}/{ranks}), device: ", host.trim());
        assert!(out.contains(&line), "no placement line {line:?}\n{out}");
    }
}

#[test]
fn batch_scripts_under_a_real_slurm() {
    let _g = mpi_lock();
    let t0 = Instant::now();
    let dir = scratch("slurm-jobs");
    let (x, y) = synthetic(2400, D, 3, 21);
    write_classes(&dir.join("d.h5"), &x, D, &y);
    let (tx, ty) = synthetic(300, D, 3, 22);
    write_classes(&dir.join("t.h5"), &tx, D, &ty);
    job(&dir, &[D, 32, 3], "d.h5", Some("t.h5"), "[checkpoint]\nevery_steps = 200\nkeep = 2\n");
    let s = Slurm::start();
    eprintln!("slurm up after {:.1} s", t0.elapsed().as_secs_f64());
    let two = ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1"];

    // (a), (b): a short job with srun (PMIx) and with mpirun inside the allocation.
    for launcher in ["srun", "mpirun"] {
        let t = Instant::now();
        let set = format!("output.dir=out-{launcher}");
        let id = s.submit("cpu.sbatch", &dir, &[], &[("HVTRAIN_LAUNCHER", launcher), ("HVTRAIN_SET", &set)]);
        let (state, code) = s.wait_end(&id, 60);
        let out = output(&dir, &id);
        assert_eq!((state.as_str(), code.as_str()), ("COMPLETED", "0:0"), "{launcher}\n{out}\n{}", s.logs());
        assert!(out.contains("2 ranks on ") && out.contains(launcher), "{out}");
        assert_placement(&out, 2);
        assert!(out.contains("done: test accuracy") && out.contains("hvtrain: exit code 0"), "{out}");
        assert!(dir.join(format!("out-{launcher}/weights.h5")).exists());
        eprintln!("ok: cpu.sbatch with {launcher}: COMPLETED in {:.1} s", t.elapsed().as_secs_f64());
    }

    // (c) scancel while training: every rank gets SIGTERM, checkpoints, exits 75; no requeue.
    let t = Instant::now();
    let long = [("HVTRAIN_SET", "output.dir=out-cancel training.epochs=1000")];
    let id = s.submit("cpu.sbatch", &dir, &two, &long);
    let out = cancel_when_training(&s, &dir, &id, 1);
    assert!(out.contains("stopped by a signal") && out.contains("hvtrain: exit code 75"), "{out}");
    assert!(!out.contains("requeueing"), "a cancelled job is not requeued\n{out}");
    // The checkpoint of the step the ranks stopped at, not only the periodic one of step 200
    // (2400 samples / 2 ranks / batch 4 = 300 steps per epoch).
    let step = assert_stop_checkpoint(&dir.join("out-cancel"), &out, 300);
    eprintln!("ok: scancel -> checkpoint at step {step}, exit 75, CANCELLED in {:.1} s", t.elapsed().as_secs_f64());

    // (d) The time-limit warning (--signal=B:USR1@120 reaches the batch shell; here sent by
    // hand): the script forwards it, the ranks checkpoint and exit 75, the script requeues the
    // job, and the requeued run resumes from the checkpoint. Both launchers.
    for launcher in ["srun", "mpirun"] {
        let t = Instant::now();
        let set = format!("output.dir=out-requeue-{launcher} training.epochs=1000");
        let id = s.submit("cpu.sbatch", &dir, &two, &[("HVTRAIN_LAUNCHER", launcher), ("HVTRAIN_SET", &set)]);
        wait_output(&s, &dir, &id, "first step done", 1, 30);
        std::thread::sleep(Duration::from_millis(500));
        let (ok, msg) = s.cmd("scancel", &["--batch", "--signal=USR1", &id]);
        assert!(ok, "scancel --batch --signal=USR1: {msg}");
        wait_output(&s, &dir, &id, "hvtrain: requeueing job", 1, 30);
        // Slurm holds a requeued job for about 2 minutes (its begin time); skip that here.
        let t1 = Instant::now();
        loop {
            let (state, _, restarts) = s.job(&id);
            if state == "PENDING" && restarts == "1" {
                break;
            }
            assert!(t1.elapsed() < Duration::from_secs(30), "job {id} not requeued: {state}, {restarts} restarts");
            std::thread::sleep(Duration::from_millis(200));
        }
        // That hold also lets the first run finish cleaning up on the node: started at once,
        // the requeued run's step would clash with the old one's PMIx socket, or its launch
        // would meet the old run's revoked credential. Wait for that instead (the node idle,
        // no step socket left, and a second more, as credentials have 1 s resolution).
        let t1 = Instant::now();
        let pmix = format!("stepd.slurm.pmix.{id}.");
        loop {
            let idle = s.cmd("sinfo", &["-h", "-o", "%T"]).1.trim() == "idle";
            let mut spool = std::fs::read_dir(s.state.join("spool")).unwrap().flatten();
            if idle && !spool.any(|e| e.file_name().to_string_lossy().starts_with(&pmix)) {
                break;
            }
            assert!(t1.elapsed() < Duration::from_secs(30), "job {id}: the first run is still on the node after 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(1100));
        let (ok, msg) = s.cmd("scontrol", &["update", &format!("JobId={id}"), "StartTime=now"]);
        assert!(ok, "scontrol update StartTime=now: {msg}");
        wait_output(&s, &dir, &id, "first step done", 2, 60);
        let out = output(&dir, &id);
        assert!(out.contains("stopped by a signal") && out.contains("hvtrain: exit code 75 (got SIGUSR1)"), "{out}");
        assert!(out.contains("(restart 1)"), "{out}");
        let step: u64 = out
            .split("stopped by a signal at step ")
            .nth(1)
            .and_then(|r| r.split(';').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no step in the stop line\n{out}"));
        let ckpt = format!("out-requeue-{launcher}/ckpt-step{step:09}.h5 at step {step}");
        assert!(out.contains(&format!("resuming from {ckpt}")), "the requeued run resumes from {ckpt}\n{out}");
        s.cmd("scancel", &[&id]);
        s.wait_end(&id, 30);
        eprintln!(
            "ok: USR1 with {launcher} -> exit 75, requeued, resumed from {ckpt}; {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }

    // (e) One node with two (pretend) GPUs: one rank per GPU; device auto falls back to the
    // CPU and says so; the script's default, cuda, is a clear error on a node without CUDA.
    let t = Instant::now();
    let gpu = ["--gres=gpu:2", "--ntasks-per-node=2", "--cpus-per-task=1"];
    let id =
        s.submit("gpu-node.sbatch", &dir, &gpu, &[("HVTRAIN_DEVICE", "auto"), ("HVTRAIN_SET", "output.dir=out-gpu")]);
    let (state, code) = s.wait_end(&id, 60);
    let out = output(&dir, &id);
    assert_eq!((state.as_str(), code.as_str()), ("COMPLETED", "0:0"), "{out}");
    assert_placement(&out, 2);
    assert!(out.contains("done: test accuracy"), "{out}");
    let id = s.submit("gpu-node.sbatch", &dir, &gpu, &[("HVTRAIN_SET", "output.dir=out-gpu-cuda")]);
    let (state, code) = s.wait_end(&id, 60);
    let out = output(&dir, &id);
    assert_eq!(state, "FAILED", "{out}");
    assert!(code != "0:0" && out.contains("training.device = \"cuda\""), "{code}\n{out}");
    eprintln!(
        "ok: gpu-node.sbatch (auto: COMPLETED; cuda without CUDA: FAILED, {code}) in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    // (f) The multi-node script, its node count overridden to the one node there is.
    let t = Instant::now();
    let id = s.submit("multi-node.sbatch", &dir, &two, &[("HVTRAIN_SET", "output.dir=out-multi")]);
    let (state, code) = s.wait_end(&id, 60);
    let out = output(&dir, &id);
    assert_eq!((state.as_str(), code.as_str()), ("COMPLETED", "0:0"), "{out}");
    assert_placement(&out, 2);
    eprintln!("ok: multi-node.sbatch on 1 node in {:.1} s", t.elapsed().as_secs_f64());

    // (g) The sweep script: a search of 4 trials on the 2 ranks, then scancel of a longer one
    // (every running trial's stop checkpoint, exit 75), which `--resume auto` finishes.
    let t = Instant::now();
    let text =
        std::fs::read_to_string(dir.join("job.toml")).unwrap().replace("[data]\n", "[data]\nvalidation_split = 0.1\n");
    let sweep =
        "[sweep]\ntrials = 4\nscheduler = \"none\"\n[sweep.space]\n\"optimizer.lr\" = { log_uniform = [0.001, 0.1] }\n";
    std::fs::write(dir.join("sweep.toml"), format!("{text}\n{sweep}")).unwrap();
    let jobs = repo().join("jobs").display().to_string();
    let env =
        |set: &'static str| [("HVTRAIN_JOB", "sweep.toml"), ("HVTRAIN_JOBS_DIR", jobs.as_str()), ("HVTRAIN_SET", set)];
    let id = s.submit("sweep.sbatch", &dir, &two, &env("output.dir=out-sweep"));
    let (state, code) = s.wait_end(&id, 90);
    let out = output(&dir, &id);
    assert_eq!((state.as_str(), code.as_str()), ("COMPLETED", "0:0"), "{out}");
    assert!(out.contains("hvtrain sweep: job") && out.contains("sweep done: trials by val_loss"), "{out}");
    let lines = std::fs::read_to_string(dir.join("out-sweep/sweep.jsonl")).unwrap();
    assert_eq!(lines.lines().filter(|l| l.contains("\"completed\"")).count(), 4, "{lines}");
    let id = s.submit("sweep.sbatch", &dir, &two, &env("output.dir=out-sweep-cancel training.epochs=1000"));
    let out = cancel_when_training(&s, &dir, &id, 2);
    assert!(out.contains("sweep stopped by a signal") && out.contains("hvtrain: exit code 75"), "{out}");
    let lines = std::fs::read_to_string(dir.join("out-sweep-cancel/sweep.jsonl")).unwrap();
    assert_eq!(lines.lines().filter(|l| l.contains("\"running\"")).count(), 2, "two trials were running\n{lines}");
    eprintln!("ok: sweep.sbatch completed, and scancel -> exit 75, in {:.1} s", t.elapsed().as_secs_f64());
    drop(s);
    eprintln!("all Slurm cases in {:.1} s", t0.elapsed().as_secs_f64());
}
