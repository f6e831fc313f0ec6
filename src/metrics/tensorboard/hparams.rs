//! TensorBoard's HParams plugin data for a sweep (`hvtrain sweep`): the experiment (every
//! key of the space with its domain, and the metrics to show) in an events file at the
//! sweep's folder, and each trial's session (its values, then its status when it ends) in an
//! events file of its own at the trial's `tensorboard/` folder, beside the `train/`,
//! `validation/` and `test/` runs that hold its curves. TensorBoard's HParams tab then lists
//! the trials with their values and metrics (table, parallel coordinates, scatter plots), as
//! for KerasTuner's or `hp.KerasCallback`'s logs. The messages are `plugin_data.proto`'s and
//! `api.proto`'s (tensorboard/plugins/hparams), written by hand with their tag numbers.
//!
//! Each file is written whole and renamed into place, so a reader never sees half of one and
//! a resumed sweep rewrites rather than repeats.
//!
//! Must not: know the sweep's scheduling (`sweep` says what each trial's state is), or write
//! anything but these two kinds of file.

use super::proto::{Event, PluginData, SummaryMetadata, TensorProto, TensorShapeProto, Val, Value};
use super::record;
use crate::error::{Error, Result};
use prost::Message;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Clone, PartialEq, prost::Message)]
pub struct HParamsPluginData {
    #[prost(int32, tag = "1")]
    pub version: i32,
    #[prost(oneof = "Data", tags = "2, 3, 4")]
    pub data: Option<Data>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Data {
    #[prost(message, tag = "2")]
    Experiment(Experiment),
    #[prost(message, tag = "3")]
    SessionStartInfo(SessionStartInfo),
    #[prost(message, tag = "4")]
    SessionEndInfo(SessionEndInfo),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Experiment {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(double, tag = "3")]
    pub time_created_secs: f64,
    #[prost(message, repeated, tag = "4")]
    pub hparam_infos: Vec<HParamInfo>,
    #[prost(message, repeated, tag = "5")]
    pub metric_infos: Vec<MetricInfo>,
    #[prost(string, tag = "6")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HParamInfo {
    #[prost(string, tag = "1")]
    pub name: String,
    /// 1 string, 2 bool, 3 float64.
    #[prost(int32, tag = "4")]
    pub r#type: i32,
    #[prost(oneof = "Domain", tags = "5, 6")]
    pub domain: Option<Domain>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Domain {
    #[prost(message, tag = "5")]
    Discrete(ListValue),
    #[prost(message, tag = "6")]
    Interval(Interval),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Interval {
    #[prost(double, tag = "1")]
    pub min_value: f64,
    #[prost(double, tag = "2")]
    pub max_value: f64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricInfo {
    #[prost(message, optional, tag = "1")]
    pub name: Option<MetricName>,
    #[prost(string, tag = "3")]
    pub display_name: String,
    /// 0 unknown, 1 training, 2 validation.
    #[prost(int32, tag = "5")]
    pub dataset_type: i32,
}

/// A scalar tag in the session's run, or in its subfolder `group` (`validation`, `train`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricName {
    #[prost(string, tag = "1")]
    pub group: String,
    #[prost(string, tag = "2")]
    pub tag: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SessionStartInfo {
    #[prost(btree_map = "string, message", tag = "1")]
    pub hparams: BTreeMap<String, PbValue>,
    #[prost(string, tag = "4")]
    pub group_name: String,
    #[prost(double, tag = "5")]
    pub start_time_secs: f64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SessionEndInfo {
    /// `Status`.
    #[prost(int32, tag = "1")]
    pub status: i32,
    #[prost(double, tag = "2")]
    pub end_time_secs: f64,
}

/// `api.proto`'s `Status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Success = 1,
    Failure = 2,
}

/// `google.protobuf.Value` (the kinds hvtrain writes).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbValue {
    #[prost(oneof = "Kind", tags = "2, 3, 4")]
    pub kind: Option<Kind>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Kind {
    #[prost(double, tag = "2")]
    Number(f64),
    #[prost(string, tag = "3")]
    Text(String),
    #[prost(bool, tag = "4")]
    Bool(bool),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListValue {
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<PbValue>,
}

/// A JSON value as a hyperparameter's value: numbers, strings and booleans as themselves,
/// anything else (a list of layer widths) as its JSON text.
pub fn pb_value(v: &serde_json::Value) -> PbValue {
    PbValue {
        kind: Some(match v {
            serde_json::Value::Number(n) => Kind::Number(n.as_f64().unwrap_or(f64::NAN)),
            serde_json::Value::String(s) => Kind::Text(s.clone()),
            serde_json::Value::Bool(b) => Kind::Bool(*b),
            other => Kind::Text(other.to_string()),
        }),
    }
}

/// The data type a hyperparameter's values have: 3 float64 when all are numbers, 2 bool when
/// all are booleans, else 1 string.
pub fn data_type(values: &[PbValue]) -> i32 {
    if values.iter().all(|v| matches!(v.kind, Some(Kind::Number(_)))) {
        3
    } else if values.iter().all(|v| matches!(v.kind, Some(Kind::Bool(_)))) {
        2
    } else {
        1
    }
}

/// One summary value of the hparams plugin holding `data` (an empty tensor: the plugin reads
/// only the metadata).
fn plugin_value(tag: &str, data: Data) -> Value {
    let content = HParamsPluginData { version: 0, data: Some(data) }.encode_to_vec();
    Value {
        tag: tag.into(),
        metadata: Some(SummaryMetadata {
            plugin_data: Some(PluginData { plugin_name: "hparams".into(), content }),
            data_class: 2,
        }),
        value: Some(Val::Tensor(TensorProto {
            dtype: 7,
            tensor_shape: Some(TensorShapeProto {}),
            string_val: vec![vec![]],
        })),
    }
}

/// Write `events` as the events file `dir/name`, whole: into a temporary file, then renamed.
fn write_file(dir: &Path, name: &str, events: &[Event]) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create", e))?;
    let mut bytes = record::frame(&super::file_version().encode_to_vec());
    for ev in events {
        bytes.extend(record::frame(&ev.encode_to_vec()));
    }
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, &bytes).map_err(|e| Error::io(&tmp, "write", e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, "rename into place", e))
}

/// The sweep's experiment: its keys (with their domains) and the metrics to show, as the
/// events file `dir/events.out.tfevents.hparams.v2` (the sweep's folder: TensorBoard's
/// logdir).
pub fn write_experiment(dir: &Path, name: &str, hparams: Vec<HParamInfo>, metrics: Vec<MetricInfo>) -> Result<()> {
    let exp = Experiment {
        name: name.into(),
        description: format!("hvtrain sweep {name}"),
        time_created_secs: super::now(),
        hparam_infos: hparams,
        metric_infos: metrics,
    };
    let ev = super::summary(0, vec![plugin_value("_hparams_/experiment", Data::Experiment(exp))]);
    write_file(dir, "events.out.tfevents.hparams.v2", &[ev])
}

/// What a trial's session file says beyond its values: its status once it ended, and scalars
/// in its own run (epochs trained, where it was halved) at the step of its last epoch.
pub struct Ended {
    pub status: Status,
    pub epochs: usize,
    pub scalars: Vec<(String, f64)>,
}

/// A trial's session: its values (`hparams`) from `start` (seconds since the epoch), and how it
/// ended (`ended`; None while it runs or waits at a rung), as the events file
/// `dir/events.out.tfevents.session.v2` (the trial's `tensorboard/` folder).
pub fn write_session(
    dir: &Path,
    group: &str,
    hparams: BTreeMap<String, PbValue>,
    start: f64,
    ended: Option<Ended>,
) -> Result<()> {
    let info = SessionStartInfo { hparams, group_name: group.into(), start_time_secs: start };
    let mut events =
        vec![super::summary(0, vec![plugin_value("_hparams_/session_start_info", Data::SessionStartInfo(info))])];
    if let Some(e) = ended {
        let scalars = e.scalars.iter().map(|(tag, v)| super::scalar(tag, *v)).collect();
        events.push(super::summary(e.epochs as i64, scalars));
        let end = SessionEndInfo { status: e.status as i32, end_time_secs: super::now() };
        events.push(super::summary(
            e.epochs as i64,
            vec![plugin_value("_hparams_/session_end_info", Data::SessionEndInfo(end))],
        ));
    }
    write_file(dir, "events.out.tfevents.session.v2", &events)
}
