//! `hvtrain export --format onnx`: for every activation and both losses, a model trained for
//! one epoch is exported, `onnx.checker` accepts the file, and onnxruntime gives the outputs
//! (and softmax probabilities) of `hvtrain predict` within 1e-5. Also from a checkpoint, from
//! a tensor-parallel run's weights, from a weights file written before the model attributes
//! existed, and with data.x_scale/x_offset; a job that disagrees
//! with the file's attributes is refused (by export and by predict).
//!
//! onnx and onnxruntime come from a Python virtual environment (`make onnx-venv`, under
//! target/): HVTRAIN_ONNX_PYTHON names its python (default target/onnx-venv/bin/python).
//! Without it the onnxruntime comparison is skipped, unless HVTRAIN_REQUIRE_ONNX=1.

use crate::common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const D: usize = 6;
const K: usize = 3;
const LAYERS: [usize; 4] = [D, 12, 10, K];
const TOL: f64 = 1e-5;

/// The python with onnx, onnxruntime, numpy and h5py, or None (skipped) when there is none.
fn python() -> Option<PathBuf> {
    let p = std::env::var_os("HVTRAIN_ONNX_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/onnx-venv/bin/python"));
    let ok = Command::new(&p)
        .args(["-c", "import onnx, onnxruntime, numpy, h5py"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    let require = std::env::var("HVTRAIN_REQUIRE_ONNX").as_deref() == Ok("1");
    match (ok, require) {
        (true, _) => Some(p),
        (false, true) => panic!(
            "HVTRAIN_REQUIRE_ONNX=1 but {} cannot import onnx, onnxruntime, numpy, h5py: run `make onnx-venv`",
            p.display()
        ),
        (false, false) => {
            eprintln!(
                "export: onnxruntime comparison skipped: no python with onnx and onnxruntime at {} \
                 (`make onnx-venv`, or set HVTRAIN_ONNX_PYTHON)",
                p.display()
            );
            None
        }
    }
}

/// Checks every case in one python run: checker, opset, names, dynamic batch, and the
/// largest absolute differences to `hvtrain predict`'s file.
const CHECK_PY: &str = r#"
import json, sys
import numpy as np, h5py, onnx, onnxruntime as ort
res = []
for c in json.load(open(sys.argv[1])):
    m = onnx.load(c["onnx"])
    onnx.checker.check_model(m, full_check=True)
    sess = ort.InferenceSession(c["onnx"], providers=["CPUExecutionProvider"])
    x = h5py.File(c["input"], "r")["x"][:].astype(np.float32)
    names = [o.name for o in sess.get_outputs()]
    got = dict(zip(names, sess.run(None, {"x": x})))
    pred = h5py.File(c["pred"], "r")
    r = {
        "name": c["name"],
        "opset": [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")],
        "inputs": [(i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]) for i in m.graph.input],
        "outputs": names,
        "diff_outputs": float(np.max(np.abs(got["outputs"] - pred["outputs"][:]))),
        "diff_batch_of_one": float(np.max(np.abs(sess.run(["outputs"], {"x": x[:1]})[0] - pred["outputs"][:1]))),
        "attrs": {k: (v.tolist() if hasattr(v, "tolist") else str(v)) for k, v in h5py.File(c["weights"], "r").attrs.items()},
    }
    if "probabilities" in got:
        r["diff_probabilities"] = float(np.max(np.abs(got["probabilities"] - pred["probabilities"][:])))
    res.append(r)
print(json.dumps(res))
"#;

struct Case {
    name: String,
    onnx: String,
    input: String,
    pred: String,
    weights: String,
    classify: bool,
    /// The attributes the weights file must record (None: a file without them).
    attrs: Option<(String, String)>,
}

fn ok(r: Run) -> Run {
    assert!(r.ok(), "{}", r.all());
    r
}

/// Train `act` × `loss` for one epoch in `dir`; returns the job file's name.
fn train(dir: &Path, act: &str, loss: &str) -> String {
    let (x, y) = synthetic(64, D, K, 5);
    let classify = loss == "softmax_cross_entropy";
    let f = hdf5::File::create(dir.join("d.h5")).unwrap();
    write_dataset(&f, "x", &x, &[64, D]);
    if classify {
        write_dataset(&f, "y", &y, &[64]);
    } else if loss == "binary_cross_entropy" {
        let t: Vec<f32> = (0..64 * K).map(|i| (x[(i * 7) % x.len()] > 0.0) as u8 as f32).collect();
        write_dataset(&f, "y", &t, &[64, K]);
    } else {
        let t: Vec<f32> = (0..64 * K).map(|i| x[(i * 7) % x.len()] * 0.5).collect();
        write_dataset(&f, "y", &t, &[64, K]);
    }
    drop(f);
    let (tx, ty) = synthetic(37, D, K, 6); // an odd count: not a multiple of any batch
    write_classes(&dir.join("t.h5"), &tx.iter().map(|v| v * 3.0).collect::<Vec<_>>(), D, &ty);
    let extra = "[checkpoint]\nevery_steps = 5\nkeep = 1\n";
    let job = job(dir, &LAYERS, "d.h5", None, extra);
    let text = std::fs::read_to_string(&job)
        .unwrap()
        .replace("[model]\n", &format!("[model]\nactivation = {}\nloss = \"{loss}\"\n", toml_activation(act)));
    std::fs::write(&job, text).unwrap();
    ok(hvtrain(&["train", "job.toml"], dir, 120));
    "job.toml".into()
}

/// `relu` as a TOML string, `gelu,tanh` (one per hidden layer) as a TOML list.
fn toml_activation(act: &str) -> String {
    let quoted: Vec<String> = act.split(',').map(|a| format!("\"{a}\"")).collect();
    if quoted.len() == 1 {
        quoted[0].clone()
    } else {
        format!("[{}]", quoted.join(", "))
    }
}

/// Export `weights` and predict with it; returns the case for the python check.
fn case(dir: &Path, name: &str, weights: &str, classify: bool, attrs: Option<(&str, &str)>) -> Case {
    case_with(dir, name, weights, classify, attrs, &[])
}

/// Overrides for export and predict: inputs scaled on read.
const SCALED: &[&str] = &["--set", "data.x_scale=0.25", "--set", "data.x_offset=-0.125"];

/// `case` with `--set` overrides for both export and predict.
fn case_with(
    dir: &Path,
    name: &str,
    weights: &str,
    classify: bool,
    attrs: Option<(&str, &str)>,
    sets: &[&str],
) -> Case {
    let onnx = format!("{name}.onnx");
    let mut args = vec!["export", "job.toml", "--weights", weights, "--format", "onnx", "--output", &onnx];
    args.extend_from_slice(sets);
    if classify {
        args.push("--softmax");
    }
    let r = ok(hvtrain(&args, dir, 60));
    assert!(r.stderr.contains("ONNX opset 17"), "{}", r.all());
    let pred = format!("{name}-pred.h5");
    let mut args = vec!["predict", "job.toml", "--weights", weights, "--input", "t.h5", "--output", &pred];
    args.extend_from_slice(sets);
    ok(hvtrain(&args, dir, 60));
    let abs = |p: &str| dir.join(p).display().to_string();
    Case {
        name: name.into(),
        onnx: abs(&onnx),
        input: abs("t.h5"),
        pred: abs(&pred),
        weights: abs(weights),
        classify,
        attrs: attrs.map(|(a, l)| (a.to_string(), l.to_string())),
    }
}

/// A copy of `src` with the datasets only, as hvtrain wrote weights.h5 before it recorded
/// the model as attributes.
fn strip_attrs(src: &Path, dst: &Path) {
    let s = hdf5::File::open(src).unwrap();
    let d = hdf5::File::create(dst).unwrap();
    let layers: Vec<i64> = s.dataset("layers").unwrap().read_raw().unwrap();
    write_dataset(&d, "layers", &layers, &[layers.len()]);
    for l in 0..LAYERS.len() - 1 {
        d.create_group(&format!("dense{l}")).unwrap();
        for t in ["weight", "bias"] {
            let name = format!("dense{l}/{t}");
            let ds = s.dataset(&name).unwrap();
            write_dataset(&d, &name, &ds.read_raw::<f32>().unwrap(), &ds.shape());
        }
    }
    assert!(d.attr_names().unwrap().is_empty());
}

#[test]
fn onnx_export_matches_predict_for_every_activation_and_loss() {
    let py = python();
    let mut cases = Vec::new();
    for loss in ["softmax_cross_entropy", "mse", "binary_cross_entropy"] {
        // The activations past the first four once, with one loss (the graph's hidden layers do
        // not depend on the loss).
        let more: &[&str] =
            if loss == "mse" { &["silu", "sigmoid", "softplus", "elu", "selu", "leaky_relu"] } else { &[] };
        // One activation per hidden layer (the weights file says `gelu,tanh`; the graph has
        // a Gelu node after the first layer and a Tanh after the second).
        let per_layer: &[&str] = if loss == "mse" { &["gelu,tanh"] } else { &[] };
        for &act in ["relu", "tanh", "gelu", "identity"].iter().chain(more).chain(per_layer) {
            let name = format!("{act}-{loss}");
            let dir = scratch(&format!("export-{name}"));
            train(&dir, act, loss);
            // With probabilities: softmax (classes) or sigmoid (multi-label).
            let classify = loss != "mse";
            cases.push(case(&dir, &name, "out/weights.h5", classify, Some((act, loss))));
            if act == "gelu" {
                // A checkpoint as --weights (step 15 of 16: not the final weights).
                let ckpt = checkpoints(&dir.join("out")).pop().expect("a checkpoint");
                let w = format!("out/{ckpt}");
                cases.push(case(&dir, &format!("{name}-checkpoint"), &w, classify, Some((act, loss))));
                // A file from before the attributes: exported with the job's model.
                strip_attrs(&dir.join("out/weights.h5"), &dir.join("old.h5"));
                cases.push(case(&dir, &format!("{name}-no-attributes"), "old.h5", classify, None));
                // The job must agree with the model the file records.
                let r = hvtrain(
                    &[
                        "export",
                        "job.toml",
                        "--set",
                        "model.activation=\"tanh\"",
                        "--weights",
                        "out/weights.h5",
                        "--output",
                        "bad.onnx",
                    ],
                    &dir,
                    60,
                );
                assert!(
                    !r.ok()
                        && r.stderr.contains("attribute activation")
                        && r.stderr.contains("model.activation is tanh")
                        && !dir.join("bad.onnx").exists(),
                    "{}",
                    r.all()
                );
                // predict too: the weights through a tanh network would be wrong numbers.
                let r = hvtrain(
                    &[
                        "predict",
                        "job.toml",
                        "--set",
                        "model.activation=[\"gelu\", \"tanh\"]",
                        "--weights",
                        "out/weights.h5",
                        "--input",
                        "t.h5",
                        "--output",
                        "bad.h5",
                    ],
                    &dir,
                    60,
                );
                assert!(
                    !r.ok()
                        && r.stderr.contains("the weights are of a model with activation gelu")
                        && r.stderr.contains("model.activation is gelu,tanh")
                        && !dir.join("bad.h5").exists(),
                    "{}",
                    r.all()
                );
            }
            if act == "gelu" && classify {
                // Weights of a tensor-parallel run (2 ranks, tensor = 2): the whole model, so
                // they export the same way.
                let _g = mpi_lock();
                let r = mpirun(
                    2,
                    &["train", "job.toml", "--set", "parallel.tensor=2", "--set", "output.dir=\"out-tp\""],
                    &dir,
                    120,
                );
                ok(r);
                cases.push(case(
                    &dir,
                    &format!("{name}-tensor-parallel"),
                    "out-tp/weights.h5",
                    classify,
                    Some((act, loss)),
                ));
            }
            if act == "tanh" {
                // data.x_scale and data.x_offset are in the graph, as predict applies them.
                let n = format!("{name}-x-scale");
                cases.push(case_with(&dir, &n, "out/weights.h5", classify, Some((act, loss)), SCALED));
            }
            if (!classify && act == "relu") || (classify && act == "identity") {
                // Normalization learned in training (in weights.h5) is in the graph: the model
                // takes raw inputs and, with normalize_y, returns raw-unit outputs.
                let (kind, y) = if classify { ("minmax", "none") } else { ("standard", "standard") };
                let x = format!("data.normalize=\"{kind}\"");
                let y = format!("data.normalize_y=\"{y}\"");
                ok(hvtrain(
                    &["train", "job.toml", "--set", &x, "--set", &y, "--set", "output.dir=\"out-norm\""],
                    &dir,
                    120,
                ));
                let n = format!("{name}-normalized-{kind}");
                cases.push(case(&dir, &n, "out-norm/weights.h5", classify, Some((act, loss))));
            }
            if !classify && act == "relu" {
                let r = hvtrain(
                    &["export", "job.toml", "--weights", "out/weights.h5", "--output", "p.onnx", "--softmax"],
                    &dir,
                    60,
                );
                assert!(!r.ok() && r.stderr.contains("--softmax"), "{}", r.all());
            }
        }
    }
    let Some(py) = py else { return };
    let list = serde_json::Value::Array(
        cases
            .iter()
            .map(|c| serde_json::json!({"name": c.name, "onnx": c.onnx, "input": c.input, "pred": c.pred, "weights": c.weights}))
            .collect(),
    );
    let dir = scratch("export-check");
    std::fs::write(dir.join("cases.json"), list.to_string()).unwrap();
    std::fs::write(dir.join("check.py"), CHECK_PY).unwrap();
    let out = Command::new(&py).args(["check.py", "cases.json"]).current_dir(&dir).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "python check failed\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let res: Vec<serde_json::Value> = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let mut worst = 0.0f64;
    for (c, r) in cases.iter().zip(&res) {
        eprintln!("export {}: {r}", c.name);
        assert_eq!(r["opset"], serde_json::json!([17]), "{r}");
        assert_eq!(r["inputs"], serde_json::json!([["x", ["N", D]]]), "{r}");
        let want: &[&str] = if c.classify { &["outputs", "probabilities"] } else { &["outputs"] };
        assert_eq!(r["outputs"], serde_json::json!(want), "{r}");
        for key in ["diff_outputs", "diff_batch_of_one", "diff_probabilities"] {
            if key == "diff_probabilities" && !c.classify {
                continue;
            }
            let d = r[key].as_f64().unwrap_or_else(|| panic!("{key} missing: {r}"));
            worst = worst.max(d);
            assert!(d <= TOL, "{}: {key} = {d:e} > {TOL:e}: onnxruntime disagrees with hvtrain predict\n{r}", c.name);
        }
        match &c.attrs {
            Some((act, loss)) => {
                let a = &r["attrs"];
                assert_eq!(a["activation"], serde_json::json!(act), "{r}");
                assert_eq!(a["loss"], serde_json::json!(loss), "{r}");
                assert_eq!(a["final_activation"], serde_json::json!("identity"), "{r}");
                assert_eq!(a["layers"], serde_json::json!(LAYERS), "{r}");
            }
            None => assert_eq!(r["attrs"], serde_json::json!({}), "{r}"),
        }
    }
    eprintln!("export: {} models, largest |onnxruntime - hvtrain predict| = {worst:e}", cases.len());
}
