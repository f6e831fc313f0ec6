//! TensorBoard event files (`output.tensorboard`) read by the real `tensorboard` package from
//! PyPI (in the test venv, `make onnx-venv`): a 2-rank run killed in its fourth epoch and
//! resumed from epoch 2's checkpoint; TensorBoard's data provider (what its Scalars tab asks)
//! lists the runs train, validation and test with Keras' tags, every epoch once, with the
//! values of `metrics.jsonl`, the steps' scalars every 3 steps once each, and the job as
//! text. Off, no files.

mod common;
use common::*;

const LAYERS: [usize; 3] = [6, 16, 3];

fn setup(name: &str, extra: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    let (x, y) = synthetic(384, 6, 3, 3);
    write_classes(&dir.join("d.h5"), &x, 6, &y);
    let (xt, yt) = synthetic(90, 6, 3, 4);
    write_classes(&dir.join("t.h5"), &xt, 6, &yt);
    job(&dir, &LAYERS, "d.h5", Some("t.h5"), extra);
    dir
}

const ARGS: [&str; 10] = [
    "train",
    "job.toml",
    "--set",
    "training.epochs=6",
    "--set",
    "training.batch_size=16",
    "--set",
    "data.validation_split=0.25",
    "--set",
    "output.tensorboard_every_steps=3",
];

/// What TensorBoard's data provider reads from `logdir`, as JSON: {run: {tag: [[step, value]]}}
/// for the scalars plugin, and the text plugin's tags per run.
const READ: &str = r#"
import json, sys
from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
mux = plugin_event_multiplexer.EventMultiplexer()
mux.AddRunsFromDirectory(sys.argv[1])
mux.Reload()
dp = data_provider.MultiplexerDataProvider(mux, sys.argv[1])
ctx = context.RequestContext()
scalars = dp.read_scalars(ctx, experiment_id="", plugin_name="scalars", downsample=1000)
out = {run: {tag: [[d.step, d.value] for d in data] for tag, data in tags.items()} for run, tags in scalars.items()}
text = dp.list_tensors(ctx, experiment_id="", plugin_name="text")
print(json.dumps({"scalars": out, "text": {run: sorted(tags) for run, tags in text.items()}}))
"#;

fn read_board(py: &str, dir: &std::path::Path) -> serde_json::Value {
    let code = format!("import sys; sys.argv = ['', 'out/tensorboard']\n{READ}");
    serde_json::from_str(&venv(py, dir, &code)).expect("the reader's JSON")
}

#[test]
fn tensorboard_reads_every_epoch_once_with_the_metrics_values_after_a_resume() {
    let _g = mpi_lock();
    let Some(py) = venv_python() else { return };
    let dir = setup("tb-resume", "[checkpoint]\nevery_steps = 18\n");
    // 288 training rows (a quarter held out for validation), global batch 32: 9 steps an
    // epoch. Killed at step 32 (epoch 4), after epochs 1-3 were logged; the last checkpoint is
    // step 18's, the end of epoch 2: the resumed run logs epoch 3 again.
    let killed = mpirun_env(2, &[("HVTRAIN_INJECT_FAULT", "1:32:kill")], &ARGS, &dir, 60);
    assert!(!killed.ok(), "{}", killed.all());
    let before = read_board(&py, &dir);
    assert_eq!(before["scalars"]["train"]["epoch_loss"].as_array().map(|a| a.len()), Some(3), "{before}");
    let mut resume = ARGS.to_vec();
    resume.extend(["--resume", "auto"]);
    let run = mpirun(2, &resume, &dir, 120);
    assert!(run.ok(), "{}", run.all());
    assert!(run.stderr.contains("TensorBoard event files in out/tensorboard"), "{}", run.all());
    let board = read_board(&py, &dir);
    let m = metrics(&dir);
    assert_eq!(m.len(), 6);
    let s = &board["scalars"];
    for (run, tag, key) in [
        ("train", "epoch_loss", "train_loss"),
        ("train", "epoch_accuracy", "train_accuracy"),
        ("train", "epoch_learning_rate", "lr"),
        ("train", "epoch_samples_per_sec", "samples_per_sec"),
        ("train", "epoch_exposed_comm_ms_per_step", "exposed_comm_ms_per_step"),
        ("validation", "epoch_loss", "val_loss"),
        ("validation", "epoch_accuracy", "val_accuracy"),
        ("test", "epoch_loss", "test_loss"),
        ("test", "epoch_accuracy", "test_accuracy"),
    ] {
        let got = s[run][tag].as_array().unwrap_or_else(|| panic!("no {run}/{tag} in {board}"));
        let steps: Vec<u64> = got.iter().map(|p| p[0].as_u64().unwrap()).collect();
        assert_eq!(steps, vec![1, 2, 3, 4, 5, 6], "{run}/{tag}: every epoch once, in order");
        for (p, e) in got.iter().zip(&m) {
            let (v, want) = (p[1].as_f64().unwrap(), e[key].as_f64().unwrap());
            assert!((v - want).abs() <= 1e-6 * want.abs().max(1.0), "{run}/{tag} epoch {}: {v} vs {want}", p[0]);
        }
    }
    assert_eq!(s["train"]["epoch_peak_rss_mib"].as_array().map(|a| a.len()), Some(6), "{board}");
    // The steps' scalars every 3 global steps: those the killed run logged after step 18 were
    // dropped and logged again, so each step once.
    let batch: Vec<u64> = s["train"]["batch_loss"].as_array().unwrap().iter().map(|p| p[0].as_u64().unwrap()).collect();
    assert_eq!(batch, (1..=18).map(|i| 3 * i).collect::<Vec<u64>>(), "{board}");
    assert_eq!(s["train"]["batch_learning_rate"].as_array().map(|a| a.len()), Some(18), "{board}");
    assert_eq!(board["text"]["train"], serde_json::json!(["job"]), "{board}");
}

#[test]
fn tensorboard_off_writes_no_event_files() {
    let _g = mpi_lock();
    let dir = setup("tb-off", "tensorboard = false\n");
    let run = mpirun(2, &ARGS[..4], &dir, 60);
    assert!(run.ok(), "{}", run.all());
    assert!(dir.join("out/metrics.jsonl").exists());
    assert!(!dir.join("out/tensorboard").exists(), "{}", run.all());
}
