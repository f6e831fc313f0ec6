//! The timeline: a Chrome trace (JSON; opens in Perfetto or chrome://tracing) of every
//! step's phases on every rank, one process track per rank and one thread track per
//! hvtrain thread. Recording is a push into a vector; with the timeline off nothing is
//! recorded (callers hold an `Option` and skip).
//!
//! Must not: cost anything when the timeline is off.

use super::comm::Channel;
use std::sync::Mutex;
use std::time::Instant;

pub const MAIN_TID: u32 = 1;
pub const COMM_TID: u32 = 2;
/// The layer gathers of `shard = "parameters"` with prefetch (`gather.rs`).
pub const GATHER_TID: u32 = 3;

#[derive(Clone, Debug)]
struct Event {
    name: String,
    tid: u32,
    ts_us: f64,
    dur_us: f64,
    step: u64,
}

pub struct Timeline {
    t0: Instant,
    events: Mutex<Vec<Event>>,
}

impl Timeline {
    /// `t0` should be taken right after a barrier, so ranks' clocks line up.
    pub fn new(t0: Instant) -> Timeline {
        Timeline { t0, events: Mutex::new(Vec::with_capacity(1 << 16)) }
    }

    /// Record that `name` ran on thread `tid` from `start` until now.
    pub fn span(&self, tid: u32, name: impl Into<String>, start: Instant, step: u64) {
        let end = Instant::now();
        let e = Event {
            name: name.into(),
            tid,
            ts_us: start.duration_since(self.t0).as_secs_f64() * 1e6,
            dur_us: end.duration_since(start).as_secs_f64() * 1e6,
            step,
        };
        self.events.lock().unwrap().push(e);
    }

    fn to_json_events(&self, rank: usize, host: &str) -> Vec<serde_json::Value> {
        let mut v = vec![
            serde_json::json!({"ph": "M", "name": "process_name", "pid": rank, "args": {"name": format!("rank {rank} ({host})")}}),
            serde_json::json!({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}}),
            serde_json::json!({"ph": "M", "name": "thread_name", "pid": rank, "tid": MAIN_TID, "args": {"name": "main (compute)"}}),
            serde_json::json!({"ph": "M", "name": "thread_name", "pid": rank, "tid": COMM_TID, "args": {"name": "communication"}}),
            serde_json::json!({"ph": "M", "name": "thread_name", "pid": rank, "tid": GATHER_TID, "args": {"name": "layer gathers"}}),
        ];
        for e in self.events.lock().unwrap().iter() {
            v.push(serde_json::json!({
                "name": e.name, "ph": "X", "pid": rank, "tid": e.tid,
                "ts": (e.ts_us * 1000.0).round() / 1000.0, "dur": (e.dur_us * 1000.0).round() / 1000.0,
                "args": {"step": e.step}
            }));
        }
        v
    }

    /// Gather every rank's events; rank 0 writes them all to `path` (collective).
    pub fn write_all(&self, chan: &Channel, host: &str, path: &std::path::Path) -> std::io::Result<()> {
        let mine = serde_json::to_vec(&self.to_json_events(chan.rank, host)).expect("timeline serializes");
        let all = chan.all_gather_bytes(&mine);
        if chan.rank != 0 {
            return Ok(());
        }
        let mut events = Vec::new();
        for bytes in all {
            let part: Vec<serde_json::Value> = serde_json::from_slice(&bytes).expect("timeline from a rank parses");
            events.extend(part);
        }
        let doc = serde_json::json!({"traceEvents": events, "displayTimeUnit": "ms"});
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_vec(&doc).expect("timeline serializes"))
    }
}
