//! Several hosts: hvtrain across three "hosts" made as Linux network namespaces on this
//! machine. `tests/multihost/setup.sh` makes PREFIX-h1..h3 (lo up, eth0 = 10.77.0.1..3/24,
//! no route anywhere else) whose veth pairs meet on a bridge in a fourth namespace,
//! PREFIX-br; nothing is created in the root namespace. `mpirun` runs inside h1 and starts
//! the daemons of h2 and h3 through `tests/multihost/agent.sh` (`--mca plm_rsh_agent`, in
//! place of ssh), which enters that host's namespace. Each host also gets its own host name
//! (h1, h2, h3, in a UTS namespace), so placement is visible in the log. MPI traffic
//! (`btl tcp,self`) and Open MPI's own (`oob`) are restricted to the subnet.
//!
//! - Fashion-MNIST trained on 3 hosts (one rank each) reaches the same test accuracy, and
//!   bit-identical weights, as the same job on one host with 3 ranks; every rank logs its own
//!   host; the gradients crossed every host's link.
//! - A rank killed (SIGKILL) on host 2 ends the whole job, non-zero, within 10 s.
//! - Host 3's link cut mid-training ends the whole job, non-zero, by the heartbeats (silent
//!   for 3 s), within 15 s of the cut.
//!
//! Needs root (network and UTS namespaces) and iproute2; without them these tests fail and
//! say why. Each test makes its namespaces under a fixed name of its own (leftovers of a
//! crashed run are removed first), always removes them (Drop), and holds a machine-wide lock
//! so that two test runs never share them or load the machine at the same time.

mod common;
use common::*;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const SUBNET: &str = "10.77.0.0/24";
/// How soon after a rank is killed the job must end (mpirun sees the death itself).
const KILL_BOUND: Duration = Duration::from_secs(10);
/// The job must end within this long after host 3's link is cut. Measured 8.5-12 s: the
/// heartbeats' silence limit of 3 s (watchdog_seconds); up to 2 s more while MPI_Abort hangs
/// on the lost peer before the rank exits anyway; then mpirun gives up on host 3's daemon when TCP stops
/// retransmitting the kill order to it (about 6.5 s with tcp_retries2 = 3, set in setup.sh;
/// ~15 min by Linux's default, and Open MPI's keepalive settings cover idle connections only).
const CUT_BOUND: Duration = Duration::from_secs(15);
const WATCHDOG: &str = "3";

extern "C" {
    fn flock(fd: i32, op: i32) -> i32;
}
const LOCK_EX: i32 = 2;

fn script(name: &str) -> PathBuf {
    Path::new(REPO).join("tests/multihost").join(name)
}

/// A machine-wide lock (released by the kernel when the process dies, so never stale).
fn machine_lock() -> File {
    let dir = if Path::new("/run/lock").is_dir() { PathBuf::from("/run/lock") } else { std::env::temp_dir() };
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("hvtrain-multihost.lock"))
        .expect("open the multi-host lock file");
    // SAFETY: flock on a descriptor we own; blocks until the lock is ours.
    let rc = unsafe { flock(f.as_raw_fd(), LOCK_EX) };
    assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());
    f
}

#[derive(Clone, Copy)]
enum Place {
    /// One rank on each of h1, h2, h3 (hostfile by IP), over TCP on the subnet.
    ThreeHosts,
    /// Three ranks on h1 alone, over shared memory: an ordinary one-host run.
    OneHost,
    /// Two ranks on each of h1 and h2 (ranks 0, 1 on h1): TCP between the hosts, shared
    /// memory inside each.
    TwoByTwo,
}

/// What a launch printed, with the time each stderr line arrived.
struct Launch {
    run: Run,
    started: Instant,
    lines: Vec<(Duration, String)>,
}

/// Three hosts PREFIX-h1..h3 on a bridge in PREFIX-br; removed again on drop.
struct Hosts {
    prefix: String,
    dir: PathBuf,
    _lock: File,
    _mpi: MutexGuard<'static, ()>,
}

impl Hosts {
    fn up(tag: &str) -> Hosts {
        let mpi = mpi_lock();
        let lock = machine_lock();
        if let Err(e) = Command::new("ip").arg("-V").output() {
            panic!("cannot make the hosts: `ip` (Debian package iproute2) cannot be run: {e}");
        }
        let prefix = format!("hvtmh-{tag}");
        let dir = scratch(&format!("multihost-{tag}"));
        let out = Command::new(script("setup.sh")).arg(&prefix).arg(&dir).output();
        // Built before the check, so that a half-made setup is removed too.
        let hosts = Hosts { prefix, dir, _lock: lock, _mpi: mpi };
        match out {
            Err(e) => panic!("cannot run tests/multihost/setup.sh: {e}"),
            Ok(o) if !o.status.success() => panic!(
                "cannot make the hosts (network namespaces) here: tests/multihost/setup.sh {} failed ({}):\n{}{}\n\
                 The multi-host tests need root (CAP_NET_ADMIN and CAP_SYS_ADMIN: network and UTS namespaces, \
                 veth, bridge) and iproute2.",
                hosts.prefix,
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Ok(_) => {}
        }
        hosts
    }

    fn ns(&self, n: usize) -> String {
        format!("{}-h{n}", self.prefix)
    }

    fn bridge_ns(&self) -> String {
        format!("{}-br", self.prefix)
    }

    /// Bytes through each host's switch port (rx + tx of vh1, vh2, vh3).
    fn link_bytes(&self) -> [u64; 3] {
        let mut v = [0u64; 3];
        for (i, b) in v.iter_mut().enumerate() {
            for dir in ["rx", "tx"] {
                let path = format!("/sys/class/net/vh{}/statistics/{dir}_bytes", i + 1);
                let o = Command::new("ip").args(["netns", "exec", &self.bridge_ns(), "cat", &path]).output().unwrap();
                *b += String::from_utf8_lossy(&o.stdout).trim().parse::<u64>().unwrap_or(0);
            }
        }
        v
    }

    /// `mpirun -n 3 hvtrain ARGS...` started inside h1 (host name h1), killed after
    /// `limit_s`. `on_line` sees every stderr line as it arrives, on a background thread.
    fn mpirun(
        &self,
        place: Place,
        env: &[(&str, &str)],
        args: &[String],
        limit_s: u64,
        mut on_line: impl FnMut(&str) + Send + 'static,
    ) -> Launch {
        let agent = script("agent.sh");
        let hostfile = self.dir.join("hostfile");
        let mut cmd = Command::new("timeout");
        cmd.args(["-k", "5", &limit_s.to_string(), "ip", "netns", "exec", &self.ns(1)]);
        cmd.args(["unshare", "--uts", "sh", "-c", "hostname h1 && exec \"$@\"", "sh", "mpirun"]);
        cmd.args(["--bind-to", "none", "--mca", "mpi_yield_when_idle", "1"]);
        cmd.args(["--mca", "plm_rsh_agent", agent.to_str().unwrap(), "--mca", "plm_rsh_no_tree_spawn", "1"]);
        cmd.args(["--mca", "btl_tcp_if_include", SUBNET, "--mca", "oob_tcp_if_include", SUBNET]);
        // An idle connection to a lost host is noticed in about 5 + 2 x 3 = 11 s.
        cmd.args(["--mca", "oob_tcp_keepalive_time", "5", "--mca", "oob_tcp_keepalive_intvl", "2"]);
        cmd.args(["--mca", "oob_tcp_keepalive_probes", "3"]);
        match place {
            Place::ThreeHosts => cmd.args(["--hostfile", hostfile.to_str().unwrap(), "--mca", "btl", "tcp,self"]),
            Place::OneHost => cmd.args(["--host", "10.77.0.1:3", "--mca", "btl", "self,vader"]),
            Place::TwoByTwo => cmd.args(["--host", "10.77.0.1:2,10.77.0.2:2", "--mca", "btl", "tcp,self,vader"]),
        };
        for (k, v) in env {
            cmd.env(k, v);
            cmd.args(["-x", k]);
        }
        cmd.args(["-n", if matches!(place, Place::TwoByTwo) { "4" } else { "3" }, BIN]);
        cmd.args(args);
        cmd.current_dir(REPO)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("HVTMH_PREFIX", &self.prefix)
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());

        let started = Instant::now();
        let mut child = cmd.spawn().expect("run timeout/ip/mpirun (coreutils, iproute2, Open MPI)");
        let (tx, rx) = mpsc::channel::<(bool, Duration, String)>();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let tx_out = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).split(b'\n').map_while(Result::ok) {
                let _ = tx_out.send((false, started.elapsed(), String::from_utf8_lossy(&line).into_owned()));
            }
        });
        std::thread::spawn(move || {
            for line in BufReader::new(err).split(b'\n').map_while(Result::ok) {
                let t = started.elapsed();
                let s = String::from_utf8_lossy(&line).into_owned();
                on_line(&s);
                let _ = tx.send((true, t, s));
            }
        });
        let status = child.wait().expect("wait for mpirun");
        let elapsed = started.elapsed();
        // A process left on a lost host may hold the pipes open: read what came, briefly.
        let (mut stdout, mut stderr, mut lines) = (String::new(), String::new(), Vec::new());
        let drain = Instant::now() + Duration::from_secs(3);
        while let Ok((is_err, t, s)) = rx.recv_timeout(drain.saturating_duration_since(Instant::now())) {
            let buf = if is_err { &mut stderr } else { &mut stdout };
            buf.push_str(&s);
            buf.push('\n');
            if is_err {
                lines.push((t, s));
            }
        }
        Launch { run: Run { code: status.code(), stdout, stderr, elapsed }, started, lines }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        match Command::new(script("teardown.sh")).arg(&self.prefix).output() {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!("teardown.sh {}: {}: {}", self.prefix, o.status, String::from_utf8_lossy(&o.stderr)),
            Err(e) => eprintln!("teardown.sh {}: {e}", self.prefix),
        }
    }
}

/// Fashion-MNIST as HDF5: `data/fashion-mnist-{train,test}.h5` (`make data`) when present,
/// else converted once from Debian's dataset-fashion-mnist into the test's temporary folder.
fn fashion_data() -> (String, String) {
    let repo = Path::new(REPO).join("data");
    let (train, test) = (repo.join("fashion-mnist-train.h5"), repo.join("fashion-mnist-test.h5"));
    if train.exists() && test.exists() {
        return (train.display().to_string(), test.display().to_string());
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("multihost-fmnist");
    std::fs::create_dir_all(&dir).unwrap();
    let mut paths = Vec::new();
    for (split, name) in [("train", "train.h5"), ("t10k", "test.h5")] {
        let out = dir.join(name);
        if !out.exists() {
            let tmp = dir.join(format!("{name}.part"));
            import_fashion_mnist(split, &tmp, &dir);
            std::fs::rename(&tmp, &out).unwrap();
        }
        paths.push(out.display().to_string());
    }
    (paths[0].clone(), paths[1].clone())
}

/// `train jobs/fashion-mnist.toml` on the given data with `--set` overrides.
fn train_args(out: &Path, sets: &[&str]) -> Vec<String> {
    let (train, test) = fashion_data();
    let mut v: Vec<String> = vec!["train".into(), "jobs/fashion-mnist.toml".into()];
    let own = [format!("data.train={train}"), format!("data.test={test}"), format!("output.dir={}", out.display())];
    for s in own.iter().map(String::as_str).chain(sets.iter().copied()) {
        v.push("--set".into());
        v.push(s.to_string());
    }
    v
}

/// The last epoch's test accuracy from `metrics.jsonl`.
fn final_accuracy(out: &Path) -> f64 {
    let text = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    last["test_accuracy"].as_f64().unwrap()
}

fn weights(out: &Path) -> Vec<f32> {
    let p = out.join("weights.h5");
    (0..3).flat_map(|l| [format!("dense{l}/weight"), format!("dense{l}/bias")]).flat_map(|n| read_f32(&p, &n)).collect()
}

#[test]
fn fashion_mnist_on_3_hosts_matches_one_host() {
    let h = Hosts::up("train");
    let sets = ["training.epochs=2", "training.batch_size=128"];
    let (out3, out1) = (h.dir.join("three-hosts"), h.dir.join("one-host"));

    let before = h.link_bytes();
    let three = h.mpirun(Place::ThreeHosts, &[], &train_args(&out3, &sets), 300, |_| {});
    let moved: Vec<u64> = h.link_bytes().iter().zip(before).map(|(a, b)| a - b).collect();
    assert!(three.run.ok(), "3 hosts:\n{}", three.run.all());
    for r in 0..3 {
        let want = format!("rank {r}/3 on host h{} (local rank 0/1)", r + 1);
        assert!(three.run.stderr.contains(&want), "3 hosts: no {want:?} in the log\n{}", three.run.all());
    }
    // 2 epochs x 157 steps of a 2.6 MB all-reduce: each host sends and receives GBs.
    for (i, b) in moved.iter().enumerate() {
        assert!(*b > 100_000_000, "only {b} bytes crossed host h{}'s link", i + 1);
    }

    let one = h.mpirun(Place::OneHost, &[], &train_args(&out1, &sets), 300, |_| {});
    assert!(one.run.ok(), "1 host:\n{}", one.run.all());
    for r in 0..3 {
        let want = format!("rank {r}/3 on host h1 (local rank {r}/3)");
        assert!(one.run.stderr.contains(&want), "1 host: no {want:?} in the log\n{}", one.run.all());
    }

    let (a3, a1) = (final_accuracy(&out3), final_accuracy(&out1));
    let (w3, w1) = (weights(&out3), weights(&out1));
    assert_eq!(w3.len(), w1.len());
    let differing = w3.iter().zip(&w1).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    let max_diff = w3.iter().zip(&w1).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    let same_weights = differing == 0;
    eprintln!(
        "Fashion-MNIST, 2 epochs, 3 ranks: test accuracy {a3} on 3 hosts ({:.1} s; link bytes {moved:?}), {a1} on one \
         host ({:.1} s); accuracy {}; weights {}",
        three.run.elapsed.as_secs_f64(),
        one.run.elapsed.as_secs_f64(),
        if a3 == a1 { "identical".to_string() } else { format!("differs by {:.2e}", (a3 - a1).abs()) },
        if same_weights { "bit-identical" } else { "differ" },
    );
    // The same ranks, the same data and the same reductions: the hosts change only the
    // transport (TCP instead of shared memory), never a result.
    assert!(
        same_weights,
        "weights on 3 hosts differ from one host's: {differing} of {} values, by up to {max_diff:e}",
        w3.len()
    );
    assert!(a3 > 0.8, "3 hosts reached only {a3}\n{}", three.run.all());
    assert_eq!(a3, a1, "bit-identical weights, yet the accuracy differs: 3 hosts {a3}, one host {a1}");
}

/// The hierarchical all-reduce on 2 hosts × 2 ranks, nodes found by the shared-memory split
/// (no HVTRAIN_NODE_SIZE): the log says 2 x 2, the weights equal the flat all-reduce's on the
/// same placement within float32 rounding (the sum's order changes), and no more bytes cross
/// the hosts' links than the flat all-reduce's (only the two leaders exchange; measured: about
/// the same as Open MPI's flat algorithm on this block placement, 2.54 against 2.56 GB).
#[test]
fn hierarchical_on_2_hosts_matches_flat() {
    let h = Hosts::up("hier");
    let sets = ["training.epochs=1", "training.batch_size=64", "distribution.check_every=20"];
    let (flat_out, hier_out) = (h.dir.join("flat"), h.dir.join("hier"));
    let before = h.link_bytes();
    let flat = h.mpirun(Place::TwoByTwo, &[], &train_args(&flat_out, &sets), 300, |_| {});
    let mid = h.link_bytes();
    assert!(flat.run.ok(), "flat:\n{}", flat.run.all());
    let mut hsets = sets.to_vec();
    hsets.push("distribution.hierarchical=true");
    let hier = h.mpirun(Place::TwoByTwo, &[], &train_args(&hier_out, &hsets), 300, |_| {});
    let after = h.link_bytes();
    assert!(hier.run.ok(), "hierarchical:\n{}", hier.run.all());
    assert!(hier.run.stderr.contains("hierarchical all-reduce: 2 x 2 rank(s)"), "{}", hier.run.all());
    for r in 0..4 {
        let want = format!("rank {r}/4 on host h{} (local rank {}/2)", r / 2 + 1, r % 2);
        assert!(hier.run.stderr.contains(&want), "no {want:?} in the log\n{}", hier.run.all());
    }
    let (wf, wh) = (weights(&flat_out), weights(&hier_out));
    let max_diff = wf.iter().zip(&wh).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    let link = |a: [u64; 3], b: [u64; 3]| a[0] - b[0] + a[1] - b[1];
    let (bf, bh) = (link(mid, before), link(after, mid));
    eprintln!(
        "2 x 2 ranks, 1 epoch: flat {:.1} s, {bf} bytes over h1's and h2's links; hierarchical {:.1} s, {bh} bytes; \
         weights {max_diff:e} apart; test accuracy {} / {}",
        flat.run.elapsed.as_secs_f64(),
        hier.run.elapsed.as_secs_f64(),
        final_accuracy(&flat_out),
        final_accuracy(&hier_out)
    );
    assert!(max_diff < 1e-4, "hierarchical weights {max_diff} from the flat all-reduce's");
    // 5 %: TCP acknowledgements and heartbeats grow with the run's length.
    assert!(
        bh as f64 <= bf as f64 * 1.05,
        "the hierarchical all-reduce moved {bh} bytes over the links, the flat one {bf}"
    );
}

#[test]
fn rank_killed_on_host_2_ends_the_job() {
    let h = Hosts::up("kill");
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    // Right after a progress line (every 10 steps), so that line dates the kill.
    let step = 10 * (1 + seed % 5) + 1;
    let spec = format!("1:{step}:kill");
    let sets = ["training.epochs=50", "training.log_every=10"];
    let l = h.mpirun(
        Place::ThreeHosts,
        &[("HVTRAIN_INJECT_FAULT", &spec)],
        &train_args(&h.dir.join("out"), &sets),
        60,
        |_| {},
    );
    let what = format!("3 hosts, fault {spec}");
    assert!(!l.run.ok(), "{what}: the job must fail\n{}", l.run.all());
    assert!(
        l.run.stderr.contains("rank 1 ") && l.run.stderr.contains("10.77.0.2") && l.run.stderr.contains("signal 9"),
        "{what}: mpirun must name rank 1 on 10.77.0.2 killed by signal 9\n{}",
        l.run.all()
    );
    let last_step = l.lines.iter().rev().find(|(_, s)| s.contains(&format!(" step {}/", step - 1))).map(|(t, _)| *t);
    let after = last_step.map(|t| l.run.elapsed.saturating_sub(t));
    eprintln!(
        "{what}: ended in {:.2} s with exit {:?}; {} after the kill",
        l.run.elapsed.as_secs_f64(),
        l.run.code,
        after.map(|d| format!("{:.2} s", d.as_secs_f64())).unwrap_or("?".into())
    );
    let after = after.unwrap_or_else(|| panic!("{what}: no progress line for step {}\n{}", step - 1, l.run.all()));
    // Measured from the kill (the progress line just before it), not from the start: how
    // long training takes to reach the fault step depends on the machine's load.
    assert!(after < KILL_BOUND, "{what}: ended {after:?} after the kill, more than {KILL_BOUND:?}\n{}", l.run.all());
}

/// When the link went down, and whether `ip` managed it.
type Cut = (Instant, Result<(), String>);

#[test]
fn host_3_link_cut_ends_the_job_by_the_heartbeats() {
    let h = Hosts::up("cut");
    let cut: Arc<Mutex<Option<Cut>>> = Arc::default();
    let (c, br) = (cut.clone(), h.bridge_ns());
    let on_line = move |line: &str| {
        let mut c = c.lock().unwrap();
        if c.is_none() && line.contains(" step 50/") {
            // Host 3's port on the switch goes down: its packets go nowhere, as with a pulled cable.
            let r = Command::new("ip").args(["-n", &br, "link", "set", "vh3", "down"]).output();
            let r = match r {
                Ok(o) if o.status.success() => Ok(()),
                Ok(o) => Err(format!("{}: {}", o.status, String::from_utf8_lossy(&o.stderr))),
                Err(e) => Err(e.to_string()),
            };
            *c = Some((Instant::now(), r));
        }
    };
    let watchdog = format!("distribution.watchdog_seconds={WATCHDOG}");
    let sets = ["training.epochs=50", "training.log_every=50", &watchdog];
    let l = h.mpirun(Place::ThreeHosts, &[], &train_args(&h.dir.join("out"), &sets), 120, on_line);
    let Some((at, r)) = cut.lock().unwrap().take() else {
        panic!("training never reached step 50, so the link was not cut\n{}", l.run.all())
    };
    if let Err(e) = r {
        panic!("cannot set host 3's link down (ip -n {}-br link set vh3 down): {e}", h.prefix);
    }
    let after = (l.started + l.run.elapsed).saturating_duration_since(at);
    let cut_t = at.duration_since(l.started);
    let fired = l.lines.iter().find(|(_, s)| s.contains("has sent no heartbeat")).map(|(t, _)| t.saturating_sub(cut_t));
    eprintln!(
        "3 hosts, h3's link cut at {:.2} s: a silent rank named {} later, job ended {:.2} s after the cut ({:.2} s in all) \
         with exit {:?}",
        cut_t.as_secs_f64(),
        fired.map(|d| format!("{:.2} s", d.as_secs_f64())).unwrap_or("?".into()),
        after.as_secs_f64(),
        l.run.elapsed.as_secs_f64(),
        l.run.code
    );
    assert!(!l.run.ok(), "the job must fail\n{}", l.run.all());
    assert!(
        l.run.stderr.contains("has sent no heartbeat")
            && l.run.stderr.contains(&format!("watchdog_seconds = {WATCHDOG}")),
        "the heartbeats must end the job\n{}",
        l.run.all()
    );
    assert!(after < CUT_BOUND, "the job ended {after:?} after the cut, more than {CUT_BOUND:?}\n{}", l.run.all());
}
