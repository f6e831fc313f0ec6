//! The parts of TensorBoard's protocol buffers that hvtrain writes, as prost messages written
//! by hand (the fields used, with TensorFlow's tag numbers: `tensorflow/core/util/event.proto`,
//! `framework/summary.proto`, `tensor.proto`, `tensor_shape.proto`). Unused fields are left
//! out: a reader skips what it does not know, and hvtrain only writes.
//!
//! Must not: renumber a field (the tags are TensorFlow's; a reader would misread it).

/// One record of an events file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    #[prost(int64, tag = "2")]
    pub step: i64,
    #[prost(oneof = "What", tags = "3, 5")]
    pub what: Option<What>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum What {
    /// "brain.Event:2", the first record of every file.
    #[prost(string, tag = "3")]
    FileVersion(String),
    #[prost(message, tag = "5")]
    Summary(Summary),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<Value>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Value {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(message, optional, tag = "9")]
    pub metadata: Option<SummaryMetadata>,
    #[prost(oneof = "Val", tags = "2, 5, 8")]
    pub value: Option<Val>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Val {
    /// A scalar (the scalars dashboard reads these as Keras' own).
    #[prost(float, tag = "2")]
    SimpleValue(f32),
    #[prost(message, tag = "5")]
    Histo(HistogramProto),
    #[prost(message, tag = "8")]
    Tensor(TensorProto),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryMetadata {
    #[prost(message, optional, tag = "1")]
    pub plugin_data: Option<PluginData>,
    /// 1 scalar, 2 tensor, 3 blob sequence.
    #[prost(int32, tag = "4")]
    pub data_class: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PluginData {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    #[prost(bytes = "vec", tag = "2")]
    pub content: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// 7: DT_STRING.
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShapeProto>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub string_val: Vec<Vec<u8>>,
}

/// No dimensions: a scalar.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {}

/// A histogram: bucket i counts values in (bucket_limit[i-1], bucket_limit[i]].
#[derive(Clone, PartialEq, prost::Message)]
pub struct HistogramProto {
    #[prost(double, tag = "1")]
    pub min: f64,
    #[prost(double, tag = "2")]
    pub max: f64,
    #[prost(double, tag = "3")]
    pub num: f64,
    #[prost(double, tag = "4")]
    pub sum: f64,
    #[prost(double, tag = "5")]
    pub sum_squares: f64,
    #[prost(double, repeated, tag = "6")]
    pub bucket_limit: Vec<f64>,
    #[prost(double, repeated, tag = "7")]
    pub bucket: Vec<f64>,
}
