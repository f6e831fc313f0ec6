//! TensorBoard event files (`output.tensorboard`) read by the real `tensorboard` package from
//! PyPI (in the test venv, `make onnx-venv`): a 2-rank run killed in its fourth epoch and
//! resumed from epoch 2's checkpoint; TensorBoard's data provider (what its Scalars tab asks)
//! lists the runs train, validation and test with Keras' tags, every epoch once, with the
//! values of `metrics.jsonl`, the steps' scalars every 3 steps once each, the layers'
//! histograms every 2 epochs once each (the last one spanning weights.h5's values), and the job
//! as text. A sweep's trials in the HParams plugin (its own handlers: the experiment and the
//! session groups) with sweep.jsonl's values, statuses and metrics. Off, no files.

use crate::common;
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

const ARGS: [&str; 12] = [
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
    "--set",
    "output.histogram_freq=2",
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
h = dp.read_tensors(ctx, experiment_id="", plugin_name="histograms", downsample=1000)
# Each histogram: [step, count, least left edge, largest right edge].
hist = {run: {tag: [[d.step, float(d.numpy[:, 2].sum()), float(d.numpy[0, 0]), float(d.numpy[-1, 1])] for d in data]
              for tag, data in tags.items()} for run, tags in h.items()}
import h5py, os
w = {}
if os.path.exists("out/weights.h5"):
    with h5py.File("out/weights.h5") as f:
        w = {f"dense{l}/{n}": [float(f[f"dense{l}/{n}"][:].min()), float(f[f"dense{l}/{n}"][:].max())]
             for l in range(2) for n in ("weight", "bias")}
print(json.dumps({"scalars": out, "text": {run: sorted(tags) for run, tags in text.items()}, "hist": hist, "weights": w}))
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
    // Histograms every 2 epochs (output.histogram_freq): epoch 2 from the killed run, 4 and 6
    // from the resumed one, each once; every value counted; the last spans weights.h5's.
    let h = &board["hist"]["train"];
    for (tag, n) in [("dense0/weight", 6 * 16), ("dense0/bias", 16), ("dense1/weight", 16 * 3), ("dense1/bias", 3)] {
        let got = h[tag].as_array().unwrap_or_else(|| panic!("no histogram {tag} in {board}"));
        let steps: Vec<u64> = got.iter().map(|p| p[0].as_u64().unwrap()).collect();
        assert_eq!(steps, vec![2, 4, 6], "{tag}: every second epoch once");
        for p in got {
            assert_eq!(p[1].as_f64(), Some(n as f64), "{tag}: the histogram counts every value: {p}");
        }
        let (last, w) = (&got[2], &board["weights"][tag]);
        for (i, j) in [(2, 0), (3, 1)] {
            let (a, b) = (last[i].as_f64().unwrap(), w[j].as_f64().unwrap());
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "{tag}: epoch 6's histogram {last} vs weights.h5's range {w}"
            );
        }
    }
    assert!(board["hist"].get("validation").is_none(), "histograms only in train/: {board}");
}

/// What the HParams plugin's own handlers (TensorBoard's HParams tab) make of a sweep's
/// folder: the experiment and the session groups, as JSON.
const READ_HPARAMS: &str = r#"
import json, sys
from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins.hparams import api_pb2, backend_context, get_experiment, list_session_groups
from google.protobuf import json_format
logdir = "out"
mux = plugin_event_multiplexer.EventMultiplexer()
mux.AddRunsFromDirectory(logdir)
mux.Reload()
dp = data_provider.MultiplexerDataProvider(mux, logdir)
bc = backend_context.Context(base_plugin.TBContext(logdir=logdir, multiplexer=mux, data_provider=dp))
ctx = context.RequestContext()
req = api_pb2.ListSessionGroupsRequest(start_index=0, slice_size=1000, allowed_statuses=[0, 1, 2, 3])
groups = list_session_groups.Handler(ctx, bc, "", req).run()
exp = get_experiment.Handler(ctx, bc, "", api_pb2.GetExperimentRequest()).run()
print(json.dumps({"experiment": json_format.MessageToDict(exp), "groups": json_format.MessageToDict(groups)}))
"#;

/// A sweep of 6 trials (a 3 × 2 grid, one value diverging, ASHA halving at epoch 1) in
/// TensorBoard's HParams tab: the experiment names both keys with their values and the metric;
/// every trial is a session group with sweep.jsonl's values, its status (failed: FAILURE;
/// completed or halved: SUCCESS), its val_loss as the sweep ranked it, its epochs and where it
/// was halved.
#[test]
fn the_hparams_plugin_lists_every_trial_of_a_sweep_with_its_values_status_and_metric() {
    let _g = mpi_lock();
    let Some(py) = venv_python() else { return };
    let dir = setup(
        "tb-hparams",
        "[optimizer]\nkind = \"sgd\"\n\n[sweep]\nscheduler = \"asha\"\neta = 2\nsampler = \"grid\"\n\
         [sweep.space]\n\"optimizer.lr\" = [0.01, 0.1, 1e8]\n\"model.activation\" = [\"relu\", \"tanh\"]\n",
    );
    let args = ["sweep", "job.toml", "--set", "training.epochs=3", "--set", "data.validation_split=0.25"];
    let run = mpirun(1, &args, &dir, 300);
    assert!(run.ok(), "{}", run.all());
    let hp: serde_json::Value = serde_json::from_str(&venv(&py, &dir, READ_HPARAMS)).expect("the reader's JSON");
    let infos = hp["experiment"]["hparamInfos"].as_array().unwrap_or_else(|| panic!("no experiment: {hp}"));
    let names: Vec<&str> = infos.iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["model.activation", "optimizer.lr"], "{hp}");
    assert_eq!(infos[0]["domainDiscrete"], serde_json::json!(["relu", "tanh"]), "{hp}");
    assert_eq!(infos[1]["domainDiscrete"], serde_json::json!([0.01, 0.1, 1e8]), "{hp}");
    assert_eq!(
        hp["experiment"]["metricInfos"][0]["name"],
        serde_json::json!({"group": "validation", "tag": "epoch_loss"})
    );
    let groups = hp["groups"]["sessionGroups"].as_array().unwrap_or_else(|| panic!("no session groups: {hp}"));
    let records: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("out/sweep.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!((records.len(), groups.len()), (6, 6), "{hp}");
    let mut seen = std::collections::BTreeSet::new();
    for r in &records {
        let name = format!("trial {:04}", r["trial"].as_u64().unwrap());
        let g = groups.iter().find(|g| g["name"] == name.as_str()).unwrap_or_else(|| panic!("no group {name}: {hp}"));
        assert_eq!(g["hparams"], r["params"], "{name}: the values");
        let status = r["status"].as_str().unwrap();
        seen.insert(status.to_string());
        let want = if status == "failed" { "STATUS_FAILURE" } else { "STATUS_SUCCESS" };
        assert_eq!(g["sessions"][0]["status"], want, "{name} ({status}): {g}");
        let value = |group: &str, tag: &str| {
            g["metricValues"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| {
                    m["name"]["tag"] == tag && m["name"].get("group").and_then(|x| x.as_str()).unwrap_or("") == group
                })
                .map(|m| m["value"].as_f64().unwrap_or(0.0))
        };
        let epochs = r["epochs"].as_f64().unwrap();
        assert_eq!(value("", "sweep/epochs"), Some(epochs), "{name}: {g}");
        let halved = if status == "stopped" { epochs } else { 0.0 };
        assert_eq!(value("", "sweep/halved_at_epoch"), Some(halved), "{name}: {g}");
        if let Some(m) = r["metric"].as_f64() {
            let v = value("validation", "epoch_loss").unwrap_or_else(|| panic!("{name}: no val_loss: {g}"));
            assert!(
                (v - m).abs() <= 1e-6 * m.abs().max(1.0),
                "{name}: val_loss {v} in TensorBoard, {m} in sweep.jsonl"
            );
        }
    }
    assert!(seen.contains("completed") && seen.contains("failed"), "{seen:?}");
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
