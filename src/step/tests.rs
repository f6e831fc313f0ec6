//! The step's own tests: rows kept on the device train as host copies; batches copied in a
//! step ahead train as ones copied at their step; steps replayed from graphs (a CPU that
//! emulates capture) train as plain ones, and a graph that replays wrong is dropped.
//!
//! Must not: need MPI or a GPU (one rank on the CPU backend).

use super::*;
use crate::config::{Activation, Compression, LossKind, OptimizerCfg};
use crate::device::cpu::Cpu;
use crate::parallel::reduce;

/// A one-rank stepper on the CPU for a small model, fresh from seed 1.
fn stepper() -> Stepper<Cpu> {
    stepper_on(Cpu)
}

/// The same on `be` (a CPU that emulates graph capture).
fn stepper_on(be: Cpu) -> Stepper<Cpu> {
    let model = Mlp::new(&[6, 9, 4], Activation::Relu, LossKind::SoftmaxCrossEntropy);
    let params = model.init_params(1);
    let lens: Vec<usize> = model.tensors().iter().map(|t| t.range.len()).collect();
    let plan = FusionPlan::new(&lens, 1 << 20);
    let alloc = bucket_buffers(&be, &plan).unwrap();
    let engine = Engine::new(
        reduce::for_job(None, Compression::None, Default::default(), false, &plan, false),
        plan,
        false,
        None,
        None,
        alloc,
    );
    let opt = Optimizer::new(&be, &OptimizerCfg { lr: 0.1, ..Default::default() }, model.tensors(), model.n_params, 1)
        .unwrap();
    Stepper::new(be, model, &params, opt, engine, 8, None).unwrap()
}

/// Rows gathered on the device by id train exactly as the same rows copied from host
/// memory: same order, same weights (a short last batch included).
#[test]
fn resident_rows_train_as_the_host_copy() {
    let (rows, cols, first_id) = (30usize, 6usize, 100u32);
    let mut r = crate::rng::Rng::new(3, 4);
    let data: Vec<f32> = (0..rows * cols).map(|_| r.uniform() as f32 - 0.5).collect();
    let order: Vec<usize> = (0..rows).map(|i| (i * 7 + 3) % rows).collect(); // a permutation
    let (mut host, mut dev) = (stepper(), stepper());
    dev.set_resident(&data, first_id).unwrap();
    for chunk in order.chunks(8).chain(order.chunks(8)) {
        let batch = Batch {
            rows: chunk.len(),
            x: chunk.iter().flat_map(|&i| data[i * cols..(i + 1) * cols].to_vec()).collect(),
            classes: chunk.iter().map(|&i| (i % 4) as i32).collect(),
            values: Vec::new(),
            weights: Vec::new(),
            ids: chunk.iter().map(|&i| first_id + i as u32).collect(),
            digest: 0,
        };
        let a = host.run(&batch, batch.rows, Instant::now()).unwrap();
        let bare = Batch {
            x: Vec::new(),
            classes: batch.classes.clone(),
            ids: batch.ids.clone(),
            values: Vec::new(),
            weights: Vec::new(),
            ..batch
        };
        let b = dev.run(&bare, bare.rows, Instant::now()).unwrap();
        assert_eq!(a, b, "the step's sums");
    }
    assert_eq!(host.params_host().unwrap(), dev.params_host().unwrap());
    // An id outside the resident rows is an error, not a wrong row.
    let bad = Batch {
        rows: 1,
        x: Vec::new(),
        classes: vec![0],
        values: Vec::new(),
        weights: Vec::new(),
        ids: vec![first_id - 1],
        digest: 0,
    };
    assert!(dev.run(&bad, 1, Instant::now()).unwrap_err().to_string().contains("not among the 30 rows"));
}

/// A batch copied in one step ahead (`prefetch`, as the training loop does) trains exactly
/// as one copied at its step; the prefetched copy is what the step reads (a prefetch of
/// other rows, with the step's own never copied, trains differently); and a step whose batch
/// is not the one prefetched for it is refused.
#[test]
fn prefetched_batches_train_as_copied_ones() {
    let mut r = crate::rng::Rng::new(5, 6);
    let batches: Vec<Batch> = (0..6u32)
        .map(|s| Batch {
            rows: if s == 5 { 3 } else { 8 },
            x: (0..8 * 6).map(|_| r.uniform() as f32 - 0.5).collect(),
            classes: (0..8).map(|i| ((i + s as usize) % 4) as i32).collect(),
            values: Vec::new(),
            weights: Vec::new(),
            ids: (s * 8..s * 8 + 8).collect(),
            digest: 0,
        })
        .map(|b| Batch {
            x: b.x[..b.rows * 6].to_vec(),
            classes: b.classes[..b.rows].to_vec(),
            ids: b.ids[..b.rows].to_vec(),
            ..b
        })
        .collect();
    let (mut plain, mut ahead) = (stepper(), stepper());
    assert!(ahead.prefetches());
    for (i, b) in batches.iter().enumerate() {
        let a = plain.run(b, b.rows, Instant::now()).unwrap();
        let c = ahead.run(b, b.rows, Instant::now()).unwrap();
        assert_eq!(a, c, "step {i}'s sums");
        if let Some(next) = batches.get(i + 1) {
            ahead.prefetch(next).unwrap();
        }
    }
    assert_eq!(plain.params_host().unwrap(), ahead.params_host().unwrap());
    // The step reads the prefetched rows: prefetch other rows with the same ids and count.
    let mut other = stepper();
    other.run(&batches[0], 8, Instant::now()).unwrap();
    let b1 = &batches[1];
    let fake = Batch {
        rows: b1.rows,
        x: batches[2].x.clone(),
        classes: b1.classes.clone(),
        values: Vec::new(),
        weights: Vec::new(),
        ids: b1.ids.clone(),
        digest: 0,
    };
    other.prefetch(&fake).unwrap();
    other.run(&batches[1], 8, Instant::now()).unwrap();
    let mut straight = stepper();
    straight.run(&batches[0], 8, Instant::now()).unwrap();
    straight.run(&batches[1], 8, Instant::now()).unwrap();
    assert_ne!(other.params_host().unwrap(), straight.params_host().unwrap());
    // Another batch than the one prefetched: refused.
    let mut s = stepper();
    s.run(&batches[0], 8, Instant::now()).unwrap();
    s.prefetch(&batches[1]).unwrap();
    let wrong = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.run(&batches[2], 8, Instant::now())));
    assert!(wrong.is_err(), "a step ran another batch than the one prefetched for it");
}

/// Six full batches and a short one, each with its own rows (ids step × 8..).
fn seven_batches(seed: u64) -> Vec<Batch> {
    let mut r = crate::rng::Rng::new(seed, 6);
    (0..7u32)
        .map(|s| {
            let rows = if s == 6 { 3 } else { 8 };
            Batch {
                rows,
                x: (0..rows * 6).map(|_| r.uniform() as f32 - 0.5).collect(),
                classes: (0..rows).map(|i| ((i + s as usize) % 4) as i32).collect(),
                values: Vec::new(),
                weights: Vec::new(),
                ids: (s * 8..s * 8 + rows as u32).collect(),
                digest: 0,
            }
        })
        .collect()
}

/// Steps replayed from captured graphs train exactly as plain ones (sums and weights): one
/// graph per input buffer and bucket-buffer parity, the short batch plain, the graphs
/// replayed on the other full batches, with and without batches copied a step ahead.
#[test]
fn graphed_steps_train_as_plain_ones() {
    use crate::device::cpu::GraphEmulation;
    for ahead in [false, true] {
        let batches = seven_batches(7);
        let (mut plain, mut graphed) = (stepper(), stepper_on(Cpu.emulating_graphs(GraphEmulation::Faithful)));
        for epoch in 0..2 {
            for (i, b) in batches.iter().enumerate() {
                let a = plain.run(b, b.rows, Instant::now()).unwrap();
                let g = graphed.run(b, b.rows, Instant::now()).unwrap();
                assert_eq!(a, g, "epoch {epoch} step {i}'s sums");
                if let (true, Some(next)) = (ahead, batches.get(i + 1)) {
                    graphed.prefetch(next).unwrap();
                }
            }
        }
        assert_eq!(plain.params_host().unwrap(), graphed.params_host().unwrap());
        assert_eq!(graphed.graphs.off(), None);
        // 14 steps: 2 short (plain), 2 captured, 10 replayed.
        assert_eq!((graphed.graphs.captures, graphed.graphs.replays), (2, 10), "{}", graphed.graph_summary());
        assert_eq!(plain.graphs.off(), Some("this backend does not capture"));
    }
}

/// A graph whose replay does not write the step's gradients (its launches lost) fails the
/// check at capture: graphs go off, saying why, and the run trains as a plain one.
#[test]
fn a_graph_that_replays_wrong_is_dropped() {
    use crate::device::cpu::GraphEmulation;
    let batches = seven_batches(8);
    let (mut plain, mut broken) = (stepper(), stepper_on(Cpu.emulating_graphs(GraphEmulation::Broken)));
    for b in &batches {
        assert_eq!(plain.run(b, b.rows, Instant::now()).unwrap(), broken.run(b, b.rows, Instant::now()).unwrap());
    }
    assert_eq!(plain.params_host().unwrap(), broken.params_host().unwrap());
    let why = broken.graphs.off().expect("graphs off");
    assert!(why.contains("differs from plain launches"), "{why}");
    assert_eq!((broken.graphs.captures, broken.graphs.replays), (0, 0));
}

/// Steps that need the host inside them stay plain: dropout's per-step masks.
#[test]
fn dropout_keeps_plain_launches() {
    use crate::device::cpu::GraphEmulation;
    let mut s = stepper_on(Cpu.emulating_graphs(GraphEmulation::Faithful));
    s.set_dropout(&[0.5], 3).unwrap();
    for b in &seven_batches(9) {
        s.run(b, b.rows, Instant::now()).unwrap();
    }
    assert!(s.graphs.off().is_some_and(|w| w.contains("dropout")), "{}", s.graph_summary());
    assert_eq!(s.graphs.replays, 0);
}
