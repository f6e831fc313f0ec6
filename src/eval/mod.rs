//! Evaluation and prediction: `hvtrain eval` (test metrics over all ranks) and
//! `hvtrain predict` (outputs for new inputs, `predict.rs`), from final weights or a checkpoint.
//!
//! Must not: train or write checkpoints.

use crate::config::{Job, OutputActivation};
use crate::data::classes::{self, Reference};
use crate::data::columns::Columns;
use crate::data::shard::{Expect, Labels, Shard};
use crate::device::Backend;
use crate::error::{Error, Result};
use crate::fault::At;
use crate::model::placement::TensorGroup;
use crate::model::{Held, Mlp, Params, Targets, TensorSum, Whole, Workspace};
use crate::parallel::liveness;
use crate::parallel::{check_agreement, Comm};
use crate::weights;
use log::info;
use std::path::Path;

use crate::metrics::auc::Ranking;
use crate::metrics::classes as per_class;

mod curves;
mod predict;
mod sums;
pub use predict::{predict, Options as PredictOptions};
use sums::add_outputs;
pub use sums::{eval_result, sums_len, EvalResult};

const CHUNK: usize = 512;

/// Weigh evaluation shard `shard` (data path `template`, the job's key `key`) by
/// `data.sample_weight` when every file of it holds that dataset (Keras weighs `val_loss`
/// and `evaluate`'s loss so when the rows come with weights; its metrics stay unweighted, as
/// Keras' `metrics` are). `log`: rank 0 says which it is.
pub fn weigh(job: &Job, shard: &mut Shard, template: &str, key: &str, log: bool) -> Result<()> {
    let Some(name) = &job.data.sample_weight else { return Ok(()) };
    let weighed = shard.load_eval_weights(template, key, name)?;
    if log && weighed {
        info!(
            "{key}: the loss weighted by the sample weights in {name} (as Keras weighs val_loss and evaluate's \
             loss); accuracy and the other metrics are not"
        );
    } else if log {
        info!("{key}: {template} holds no dataset {name}, so its loss is not weighted (write the weights there to weigh it)");
    }
    Ok(())
}

/// What `model` needs of its data, for opening a `Shard`.
pub fn expect(model: &Mlp) -> Expect {
    Expect { inputs: model.n_inputs(), outputs: model.n_outputs(), loss: model.loss.kind }
}

/// Start-up shared by `train` and `eval`: placement log, device choice, cross-rank checks.
pub fn start(comm: &Comm, job: &Job) -> Result<Mlp> {
    liveness::configure(job.distribution.watchdog_seconds, job.distribution.stall_seconds);
    crate::fault::point(At::Start)?;
    let (_backend, how) = crate::device::select(job.training.device, comm.local_rank)?;
    info!(
        "rank {}/{} on host {} (local rank {}/{}), device: {how}",
        comm.rank, comm.size, comm.host, comm.local_rank, comm.local_size
    );
    let _p = liveness::phase("checking that every rank has the same job configuration");
    if let Err(e) = check_agreement(comm, "the job configuration (job file + --set)", job.fingerprint()) {
        return Err(describe_job_difference(comm, job).unwrap_or(e));
    }
    Ok(Mlp::from_cfg(&job.model))
}

/// Collective, after the fingerprints differed: name the ranks, their job files and the
/// first keys whose values differ from rank 0's.
fn describe_job_difference(comm: &Comm, job: &Job) -> Option<Error> {
    let mine = serde_json::to_vec(&(job.source.as_str(), job)).ok()?;
    let all = comm.all_gather_bytes(&mine);
    let parse = |b: &[u8]| serde_json::from_slice::<(String, serde_json::Value)>(b).ok();
    let (file0, job0) = parse(&all[0])?;
    let mut parts = Vec::new();
    for (r, bytes) in all.iter().enumerate().skip(1) {
        let (file, other) = parse(bytes)?;
        let mut keys = Vec::new();
        diff("", &job0, &other, &mut keys);
        if !keys.is_empty() {
            let shown: Vec<String> = keys.iter().take(3).cloned().collect();
            parts.push(format!("rank {r} (job file {file}) at {}", shown.join(", ")));
        }
    }
    (!parts.is_empty()).then(|| {
        Error::Mismatch(format!(
            "the job configuration differs from rank 0's (job file {file0}): {}; start every rank with the same job file, --set options and HVTRAIN_* environment",
            parts.join("; ")
        ))
    })
}

/// Dotted keys where two JSON documents differ, with both values.
fn diff(prefix: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    match (a, b) {
        (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
            for (k, va) in x {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                diff(&key, va, y.get(k).unwrap_or(&serde_json::Value::Null), out);
            }
        }
        _ if a != b => out.push(format!("{prefix} ({a} vs {b})")),
        _ => {}
    }
}

/// This rank's test sums: [loss sum, correct predictions, samples]. Local work only.
/// On backend `be` (training's own: the GPU when it trains on one).
pub fn evaluate_local<B: Backend>(be: &B, model: &Mlp, params: &[f32], shard: &Shard) -> Result<Vec<f64>> {
    evaluate_on(be, model, params, shard, &mut Whole)
}

/// `evaluate_local` of this rank's part of the model (collective over its replica): a
/// tensor shard sums through its tensor group, and pipeline stages pass each chunk's
/// activations on, the last stage computing the loss. Every rank of the replica gets the
/// same sums.
pub fn evaluate_in_group<B: Backend>(
    be: &B,
    model: &Mlp,
    params: &[f32],
    shard: &Shard,
    group: &mut TensorGroup,
) -> Result<Vec<f64>> {
    if group.pipe.is_none() {
        return evaluate_on(be, model, params, shard, group);
    }
    let _p = liveness::phase("evaluating the test data (pipelined)");
    crate::fault::point(At::Eval)?;
    let mut ws = Workspace::new(be, model, CHUNK)?;
    let params = be.upload(params)?;
    let (inp, outp) = (model.n_inputs(), model.n_outputs());
    let mut xd = be.zeros(CHUNK * inp)?;
    let mut labels = be.labels(CHUNK)?;
    let mut values = be.zeros(CHUNK * outp)?;
    let mut weights = be.zeros(CHUNK)?;
    let mut x = vec![0.0f32; CHUNK * shard.features.max(inp)];
    let mut out = vec![0.0f32; CHUNK * outp];
    let mut sums = vec![0.0f64; sums_len(shard)];
    let n = shard.len();
    let mut start = 0;
    while start < n {
        let c = CHUNK.min(n - start);
        let link = group.pipe.as_mut().expect("checked above");
        if link.is_first() {
            shard.read_rows(start, c, &mut x)?;
        } else {
            link.recv_forward(&mut x[..c * inp]);
        }
        be.upload_into(&x[..c * inp], &mut xd)?;
        model.forward_tp(be, &mut Held(&params), &xd, c, &mut ws, group)?;
        let link = group.pipe.as_mut().expect("checked above");
        if !link.is_last() {
            ws.output_host(be, model, c, &mut out[..c * outp])?;
            link.send_forward(&out[..c * outp]);
            link.finish_sends();
        } else {
            let t = targets(be, shard, start..start + c, &mut labels, &mut values, &mut weights)?;
            let (l, k) = model.loss(be, t, c, 1.0, &mut ws, false)?;
            sums[0] += l;
            sums[1] += k as f64;
            sums[2] += c as f64;
            add_outputs(be, model, &ws, shard, start..start + c, &mut out, &mut sums)?;
        }
        start += c;
        liveness::progress();
    }
    group.pipe.as_ref().expect("checked above").broadcast_from_last(&mut sums);
    Ok(sums)
}

/// `evaluate_local` on backend `be`: rows are read on the host, a chunk at a time, and
/// uploaded.
fn evaluate_on<B: Backend>(
    be: &B,
    model: &Mlp,
    params: &[f32],
    shard: &Shard,
    tp: &mut impl TensorSum<B>,
) -> Result<Vec<f64>> {
    let params = be.upload(params)?;
    evaluate_with(be, model, &mut Held(&params), shard, tp, chunks(shard))
}

/// The chunks `shard`'s evaluation takes.
pub fn chunks(shard: &Shard) -> usize {
    shard.len().div_ceil(CHUNK)
}

/// This rank's test sums with the parameters as `params` gives them a layer at a time
/// (`shard = "parameters"`: each layer gathered from the data ranks' pieces as the forward
/// reads it, so no rank holds the whole model). Collective over the data group: `most` is the
/// largest `chunks` over its ranks, and a rank whose rows are done fetches the layers of the
/// chunks it does not have, so that every rank joins every gather.
pub fn evaluate_gathered<B: Backend>(
    be: &B,
    model: &Mlp,
    params: &mut impl Params<B>,
    shard: &Shard,
    most: usize,
) -> Result<Vec<f64>> {
    evaluate_with(be, model, params, shard, &mut Whole, most)
}

fn evaluate_with<B: Backend>(
    be: &B,
    model: &Mlp,
    params: &mut impl Params<B>,
    shard: &Shard,
    tp: &mut impl TensorSum<B>,
    most: usize,
) -> Result<Vec<f64>> {
    let _p = liveness::phase("evaluating the test data");
    crate::fault::point(At::Eval)?;
    let mut ws = Workspace::new(be, model, CHUNK)?;
    let mut xd = be.zeros(CHUNK * shard.features)?;
    let mut labels = be.labels(CHUNK)?;
    let mut values = be.zeros(CHUNK * model.n_outputs())?;
    let mut weights = be.zeros(CHUNK)?;
    let mut x = vec![0.0f32; CHUNK * shard.features];
    let mut out = vec![0.0f32; CHUNK * model.n_outputs()];
    let mut sums = vec![0.0f64; sums_len(shard)];
    let n = shard.len();
    let mut start = 0;
    while start < n {
        let c = CHUNK.min(n - start);
        shard.read_rows(start, c, &mut x)?;
        be.upload_into(&x[..c * shard.features], &mut xd)?;
        model.forward_tp(be, params, &xd, c, &mut ws, tp)?;
        let t = targets(be, shard, start..start + c, &mut labels, &mut values, &mut weights)?;
        let (l, k) = model.loss(be, t, c, 1.0, &mut ws, false)?;
        sums[0] += l;
        sums[1] += k as f64;
        add_outputs(be, model, &ws, shard, start..start + c, &mut out, &mut sums)?;
        start += c;
        liveness::progress();
    }
    // The chunks other ranks still have: the same fetches, without rows.
    for _ in chunks(shard)..most {
        for l in model.forward_fetches() {
            params.fetch(be, model, l)?;
        }
    }
    sums[2] = n as f64;
    Ok(sums)
}

/// The targets of the shard's `rows`, uploaded into `labels` or `values`, and their sample
/// weights into `weights` when the shard has them (`weigh`).
fn targets<'a, B: Backend>(
    be: &B,
    shard: &Shard,
    rows: std::ops::Range<usize>,
    labels: &'a mut B::Labels,
    values: &'a mut B::Buf,
    weights: &'a mut B::Buf,
) -> Result<Targets<'a, B>> {
    let rw = match &shard.sample_weights {
        Some(w) => {
            be.upload_into(&w[rows.clone()], weights)?;
            Some(be.view(weights, 0..rows.len()))
        }
        None => None,
    };
    Ok(match &shard.labels {
        Labels::Classes(v) => {
            be.upload_labels(&v[rows], labels)?;
            // Evaluation's loss is not weighted by class (as Keras' `class_weight` in `fit`).
            Targets::Classes(labels, None, rw)
        }
        Labels::Values(v, k) | Labels::Bits(v, k) => {
            be.upload_into(&v[rows.start * k..rows.end * k], values)?;
            Targets::Values(be.view(values, 0..rows.len() * k), rw)
        }
    })
}

/// What a classifier's class numbers mean for `eval`: the weights' `class_names`, else the
/// job's training data's (a checkpoint, or weights written before names were kept), else
/// nothing to compare with.
fn reference_classes(job: &Job, model: &Mlp, weights_path: &Path) -> Result<Reference> {
    if model.loss.kind.output_activation() != OutputActivation::Softmax {
        return Ok(Reference::Unknown);
    }
    let names = weights::read_class_names(weights_path)?;
    if !names.is_empty() {
        return Ok(Reference::Names(weights_path.to_path_buf(), names));
    }
    match crate::data::shard::files(&job.data.train, "data.train") {
        Ok(f) if f[0].1.exists() => classes::of_file(&f[0].1, "data.train", &job.data.y_dataset),
        _ => Ok(Reference::Unknown),
    }
}

/// `hvtrain eval`: load weights (or a checkpoint), evaluate on the job's test data over all
/// ranks; with `curves`, rank 0 writes the ROC and precision-recall curves there (`curves.rs`).
pub fn eval(comm: &Comm, job: &Job, weights_path: &Path, curves: Option<&Path>) -> Result<()> {
    let model = start(comm, job)?;
    let test = job
        .data
        .test
        .as_ref()
        .ok_or_else(|| Error::config(&job.source, "data.test", "is not set; eval needs test data"))?;
    let params = {
        let _p = liveness::phase("loading the weights");
        crate::checkpoint::params_of(weights_path, &model)?
    };
    let norm = weights::load_norm(&model, weights_path)?;
    let shard = {
        let _p = liveness::phase("opening the test data");
        let classes = reference_classes(job, &model, weights_path)?;
        let mut sh = Shard::open(&job.data, "data.test", test, comm.rank, comm.size, expect(&model), &classes)?;
        // The columns training saw: the test file's must be the same (`data::columns`).
        let names = weights::read_names(weights_path)?;
        let mut columns = Columns { x: names.x_columns, y: names.y_columns, from: Some(weights_path.to_path_buf()) };
        columns.agree(&sh.columns, "data.test")?;
        weigh(job, &mut sh, test, "data.test", comm.rank == 0)?;
        if !norm.is_none() {
            sh.set_norm(&job.data, &norm); // x and y as training saw them
        }
        sh
    };
    if let Some(path) = curves {
        curves::check(path, &shard)?;
    }
    let (kind, _) = crate::device::select(job.training.device, comm.local_rank)?;
    let mut sums = crate::device::with_backend(
        kind,
        job.training.precision,
        Evaluate { model: &model, params: &params, shard: &shard },
    )?;
    {
        let _p = liveness::phase("the all-reduce of the evaluation's sums");
        comm.all_reduce_sum_f64(&mut sums);
    }
    let r = eval_result(&sums, &shard);
    let (loss, acc) = (r.loss, r.accuracy);
    if comm.rank == 0 {
        let ranked = r.ranking.as_ref().map_or(String::new(), ranking_text);
        match (acc, &r.regression) {
            (Some(a), _) => info!("eval {}: test_loss {loss:.4} test_accuracy {a:.4}{ranked}", weights_path.display()),
            (None, Some(g)) => info!(
                "eval {}: test_loss {loss:.6} test_mae {:.6} test_rmse {:.6} test_r2 {:.4}",
                weights_path.display(),
                g.mae,
                g.rmse,
                g.r2
            ),
            (None, None) => info!("eval {}: test_loss {loss:.6}", weights_path.display()),
        }
        if let Some(c) = &r.classes {
            for line in per_class::report(c, r.ranking.as_ref(), &shard.class_names, "test") {
                info!("{line}");
            }
        }
        let mut j = serde_json::json!({"weights": weights_path.display().to_string(), "test_loss": loss, "test_accuracy": acc, "ranks": comm.size});
        if let Some(t) = r.top5 {
            j["test_top5_accuracy"] = t.into();
        }
        if let Some(g) = &r.ranking {
            j["test_auc"] = g.auc.into();
            j["test_average_precision"] = g.average_precision.into();
            if let Labels::Bits(..) = shard.labels {
                let rows: Vec<serde_json::Value> = g.problems.iter().enumerate().map(|(i, p)| serde_json::json!({"label": i, "auc": p.auc, "average_precision": p.average_precision, "positives": p.positives})).collect();
                j["test_per_label"] = rows.into();
            }
        }
        if let Some(c) = &r.classes {
            j["test_balanced_accuracy"] = c.balanced_accuracy.into();
            j["test_macro_f1"] = c.macro_f1.into();
            let rows: Vec<serde_json::Value> = c
                .classes
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    let mut o = serde_json::json!({"class": i, "recall": k.recall, "precision": k.precision, "f1": k.f1, "rows": k.rows, "predicted": k.predicted});
                    if let Some(p) = r.ranking.as_ref().filter(|g| g.problems.len() == c.classes.len()) {
                        o["auc"] = p.problems[i].auc.into();
                        o["average_precision"] = p.problems[i].average_precision.into();
                    }
                    if let Some(n) = shard.class_names.get(i) {
                        o["name"] = n.as_str().into();
                    }
                    o
                })
                .collect();
            j["test_per_class"] = rows.into();
            if let Some(m) = &c.confusion {
                j["test_confusion"] = serde_json::to_value(m).expect("serializes");
            }
        }
        if let Some(g) = &r.regression {
            j["test_mae"] = g.mae.into();
            j["test_rmse"] = g.rmse.into();
            j["test_r2"] = g.r2.into();
            j["test_per_output"] = serde_json::to_value(&g.per_output).expect("serializes");
        }
        if let Some(path) = curves {
            let names = curves::problem_names(&shard);
            let points = curves::write(path, &sums[sums::auc_at(&shard)..], names.len(), &names)?;
            info!(
                "wrote the ROC and precision-recall curves of {} ({points} thresholds) to {}",
                names.join(", "),
                path.display()
            );
            j["curves"] = path.display().to_string().into();
        }
        println!("{j}");
    }
    Ok(())
}

/// The log's ` test_auc A test_average_precision P` (a figure without rows to rank: `-`).
fn ranking_text(g: &Ranking) -> String {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}"));
    format!(" test_auc {} test_average_precision {}", f(g.auc), f(g.average_precision))
}

/// `evaluate_local` on the backend `device::select` chose.
struct Evaluate<'a> {
    model: &'a Mlp,
    params: &'a [f32],
    shard: &'a Shard,
}

impl crate::device::WithBackend<Vec<f64>> for Evaluate<'_> {
    fn run<B: Backend>(self, be: B) -> Result<Vec<f64>> {
        evaluate_local(&be, self.model, self.params, self.shard)
    }
}
