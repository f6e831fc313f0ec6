//! `[model]`: the MLP's widths, hidden activation and loss, and their checks. Owns only the
//! table; the network itself is `model/`'s.
//!
//! Must not: build the network.

use super::abbreviate;
use super::limits;
use super::ClassWeights;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    Relu,
    Tanh,
    Gelu,
    Identity,
    /// z·sigmoid(z) (Keras' `silu`, also named `swish`; PyTorch's `SiLU`).
    #[serde(alias = "swish")]
    Silu,
    Sigmoid,
    /// log(1 + e^z).
    Softplus,
    /// z for z > 0, e^z − 1 below (α = 1, as Keras' and PyTorch's default).
    Elu,
    /// λ·elu(z) with α = 1.6732632, λ = 1.0507010 (Klambauer et al.; Keras and PyTorch).
    Selu,
    /// z for z > 0, 0.2·z below: Keras' `activation="leaky_relu"` and `tf.nn.leaky_relu`
    /// (PyTorch's `LeakyReLU()` defaults to 0.01).
    LeakyRelu,
}

/// One value for every hidden layer, or a list of one per hidden layer: `model.activation`
/// (`"relu"` or `["relu", "relu", "tanh"]`, Keras' `Dense(..., activation=...)` per layer) and
/// `model.dropout` (`0.1` or `[0.1, 0.3]`). Written back as it was given, so a job with one
/// value keeps its fingerprint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PerLayer<T> {
    All(T),
    Each(Vec<T>),
}

/// `model.activation`.
pub type Activations = PerLayer<Activation>;
/// `model.dropout`: rates, 0 = none.
pub type Dropout = PerLayer<f64>;

impl<T: Clone> PerLayer<T> {
    /// As given: one entry for all layers, or one per hidden layer (what `model::Mlp` keeps
    /// of the activations).
    pub fn as_given(&self) -> Vec<T> {
        self.given().to_vec()
    }

    /// One value per hidden layer, `hidden` of them for one given for all.
    pub fn per_hidden(&self, hidden: usize) -> Vec<T> {
        match self {
            PerLayer::All(a) => vec![a.clone(); hidden],
            PerLayer::Each(v) => v.clone(),
        }
    }

    /// The values given (one, or the list), to check each.
    pub fn given(&self) -> &[T] {
        match self {
            PerLayer::All(a) => std::slice::from_ref(a),
            PerLayer::Each(v) => v,
        }
    }
}

/// `relu` for one activation, `relu,relu,tanh` for one per hidden layer (the weights file's
/// `activation` attribute, the log).
pub fn activation_names(acts: &[Activation]) -> String {
    acts.iter().map(|a| a.name()).collect::<Vec<_>>().join(",")
}

impl From<Activation> for Activations {
    fn from(a: Activation) -> Activations {
        PerLayer::All(a)
    }
}

impl Default for Dropout {
    fn default() -> Dropout {
        PerLayer::All(0.0)
    }
}

impl<T: Serialize> Serialize for PerLayer<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            PerLayer::All(a) => a.serialize(s),
            PerLayer::Each(v) => v.serialize(s),
        }
    }
}

/// A value or a list of values, each read as `T` reads it: an unknown activation name is
/// serde's "unknown variant" error (with the names allowed), which `config::hint` turns into a
/// "did you mean", and a rate that is not a number says what was expected (an untagged enum
/// would say only that nothing matched).
impl<'de, T: Deserialize<'de>> Deserialize<'de> for PerLayer<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<PerLayer<T>, D::Error> {
        use serde::de::{Error, IntoDeserializer};
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for V<T> {
            type Value = PerLayer<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("one value for every hidden layer, or a list of one per hidden layer")
            }
            fn visit_str<E: Error>(self, v: &str) -> std::result::Result<PerLayer<T>, E> {
                T::deserialize(v.into_deserializer()).map(PerLayer::All)
            }
            fn visit_f64<E: Error>(self, v: f64) -> std::result::Result<PerLayer<T>, E> {
                T::deserialize(v.into_deserializer()).map(PerLayer::All)
            }
            fn visit_i64<E: Error>(self, v: i64) -> std::result::Result<PerLayer<T>, E> {
                T::deserialize(v.into_deserializer()).map(PerLayer::All)
            }
            fn visit_u64<E: Error>(self, v: u64) -> std::result::Result<PerLayer<T>, E> {
                T::deserialize(v.into_deserializer()).map(PerLayer::All)
            }
            fn visit_bool<E: Error>(self, v: bool) -> std::result::Result<PerLayer<T>, E> {
                T::deserialize(v.into_deserializer()).map(PerLayer::All)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<PerLayer<T>, A::Error> {
                let mut v = Vec::new();
                while let Some(a) = seq.next_element::<T>()? {
                    v.push(a);
                }
                Ok(PerLayer::Each(v))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// Leaky ReLU's slope below zero (Keras' and TensorFlow's default).
pub const LEAKY_RELU_SLOPE: f32 = 0.2;
/// SELU's α and λ as float32 (Keras' constants rounded; ONNX's `Selu` defaults are these bits).
pub const SELU_ALPHA: f32 = 1.673_263_2;
pub const SELU_LAMBDA: f32 = 1.050_701;

impl Activation {
    /// Every activation, for tests and checks that cover them all.
    pub const ALL: [Activation; 10] = [
        Activation::Identity,
        Activation::Relu,
        Activation::Tanh,
        Activation::Gelu,
        Activation::Silu,
        Activation::Sigmoid,
        Activation::Softplus,
        Activation::Elu,
        Activation::Selu,
        Activation::LeakyRelu,
    ];

    /// Whether backward reads the pre-activation z, which forward then keeps: all but relu,
    /// tanh and identity (relu's and tanh's derivatives come from the output; the others' from
    /// z, which dropout leaves alone where it scales the output).
    pub fn needs_z(self) -> bool {
        !matches!(self, Activation::Relu | Activation::Tanh | Activation::Identity)
    }

    /// The job file's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Tanh => "tanh",
            Activation::Gelu => "gelu",
            Activation::Identity => "identity",
            Activation::Silu => "silu",
            Activation::Sigmoid => "sigmoid",
            Activation::Softplus => "softplus",
            Activation::Elu => "elu",
            Activation::Selu => "selu",
            Activation::LeakyRelu => "leaky_relu",
        }
    }
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LossKind {
    /// Classification: `y` holds integer class labels in [0, classes).
    #[serde(alias = "sparse_categorical_crossentropy")]
    SoftmaxCrossEntropy,
    /// Regression: `y` holds float32 targets [N, outputs]; loss is the mean over all elements.
    #[serde(alias = "mean_squared_error")]
    Mse,
    /// Regression, mean absolute error (robust to outliers; gradient sign(e)).
    #[serde(alias = "mean_absolute_error")]
    Mae,
    /// Regression, Huber: ½e² within `model.huber_delta`, δ(|e| − ½δ) beyond (Keras' `Huber`).
    Huber,
    /// Multi-label: K independent sigmoid outputs, `y` [N, K] of 0 and 1 (Keras'
    /// `BinaryCrossentropy(from_logits=True)`, mean over the K labels).
    #[serde(alias = "binary_crossentropy")]
    BinaryCrossEntropy,
    /// Regression, log(cosh(e)) (Keras' `LogCosh`): e²/2 near 0, |e| − ln 2 far out.
    #[serde(alias = "logcosh")]
    LogCosh,
    /// Regression, 100·|e| / max(|t|, 1e-7) (Keras' `MeanAbsolutePercentageError`).
    #[serde(alias = "mean_absolute_percentage_error")]
    Mape,
    /// Regression, (ln(max(p, 1e-7) + 1) − ln(max(t, 1e-7) + 1))² (Keras'
    /// `MeanSquaredLogarithmicError`): for positive targets spanning orders of magnitude.
    #[serde(alias = "mean_squared_logarithmic_error")]
    Msle,
    /// Regression, the pinball loss of quantile τ = `model.quantile`: the outputs learn the
    /// targets' τ-quantile given the inputs (TensorFlow Addons' `PinballLoss`).
    #[serde(alias = "pinball")]
    Quantile,
}

/// What a loss's targets are and what its outputs mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Targets {
    /// One integer class per row.
    Classes,
    /// Real targets [N, K]: MAE, RMSE and R² are its metrics.
    Regression,
    /// 0/1 targets [N, K]: element-wise accuracy is its metric.
    MultiLabel,
}

/// The function `predict` and the ONNX graph apply to the last layer's outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputActivation {
    Softmax,
    Sigmoid,
    Identity,
}

impl LossKind {
    pub fn targets(self) -> Targets {
        match self {
            LossKind::SoftmaxCrossEntropy => Targets::Classes,
            LossKind::Mse
            | LossKind::Mae
            | LossKind::Huber
            | LossKind::LogCosh
            | LossKind::Mape
            | LossKind::Msle
            | LossKind::Quantile => Targets::Regression,
            LossKind::BinaryCrossEntropy => Targets::MultiLabel,
        }
    }
    /// What follows the last layer: each kind of target has its own.
    pub fn output_activation(self) -> OutputActivation {
        match self.targets() {
            Targets::Classes => OutputActivation::Softmax,
            Targets::MultiLabel => OutputActivation::Sigmoid,
            Targets::Regression => OutputActivation::Identity,
        }
    }
    /// The job file's spelling.
    pub fn name(self) -> &'static str {
        match self {
            LossKind::SoftmaxCrossEntropy => "softmax_cross_entropy",
            LossKind::Mse => "mse",
            LossKind::Mae => "mae",
            LossKind::Huber => "huber",
            LossKind::BinaryCrossEntropy => "binary_cross_entropy",
            LossKind::LogCosh => "log_cosh",
            LossKind::Mape => "mape",
            LossKind::Msle => "msle",
            LossKind::Quantile => "quantile",
        }
    }
}

/// A loss with its parameter: what the model computes at its head.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Loss {
    pub kind: LossKind,
    /// Huber's δ (unused by the other losses).
    pub huber_delta: f32,
    /// The pinball loss's τ (unused by the other losses).
    pub quantile: f32,
    /// Label smoothing ε: softmax cross-entropy's target (1 − ε)·one-hot + ε/classes, binary
    /// cross-entropy's t·(1 − ε) + ε/2 (0: none; unused by the regression losses).
    pub label_smoothing: f32,
}

impl From<LossKind> for Loss {
    fn from(kind: LossKind) -> Loss {
        Loss { kind, huber_delta: DEFAULT_HUBER_DELTA as f32, quantile: DEFAULT_QUANTILE as f32, label_smoothing: 0.0 }
    }
}

/// `model.init`: how each weight starts, as Keras' initializers of the same names (its
/// `VarianceScaling`): over the mean of fan-in and fan-out (Glorot), fan-in × 2 (He) or fan-in
/// (LeCun), uniform or truncated normal (cut at 2 standard deviations, widened so the kept
/// values have the variance asked for). Biases start at 0 under every one, as in Keras.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Init {
    /// U(±√(6 / (fan_in + fan_out))): Keras' default for `Dense`.
    #[default]
    GlorotUniform,
    GlorotNormal,
    /// U(±√(6 / fan_in)): for ReLU stacks (PyTorch's `kaiming_uniform_`).
    HeUniform,
    HeNormal,
    LecunUniform,
    /// For SELU: the self-normalizing networks' initialization.
    LecunNormal,
}

impl Init {
    pub fn name(self) -> &'static str {
        match self {
            Init::GlorotUniform => "glorot_uniform",
            Init::GlorotNormal => "glorot_normal",
            Init::HeUniform => "he_uniform",
            Init::HeNormal => "he_normal",
            Init::LecunUniform => "lecun_uniform",
            Init::LecunNormal => "lecun_normal",
        }
    }

    /// The variance of a weight of a layer `fan_in` → `fan_out` (Keras' scale / n).
    pub fn variance(self, fan_in: usize, fan_out: usize) -> f64 {
        match self {
            Init::GlorotUniform | Init::GlorotNormal => 2.0 / (fan_in + fan_out) as f64,
            Init::HeUniform | Init::HeNormal => 2.0 / fan_in as f64,
            Init::LecunUniform | Init::LecunNormal => 1.0 / fan_in as f64,
        }
    }

    /// Whether its weights are drawn from a truncated normal (else uniform).
    pub fn normal(self) -> bool {
        matches!(self, Init::GlorotNormal | Init::HeNormal | Init::LecunNormal)
    }
}

fn is_default_init(i: &Init) -> bool {
    *i == Init::default()
}

/// The largest dropout rate (a rate of 1 drops every unit; above this the kept ones are scaled
/// by more than 100).
pub const MAX_DROPOUT: f64 = 0.99;

/// Keras' `Huber(delta=1.0)`.
pub const DEFAULT_HUBER_DELTA: f64 = 1.0;
/// `loss = "quantile"`'s τ when `model.quantile` is not set: the median.
pub const DEFAULT_QUANTILE: f64 = 0.5;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCfg {
    /// Layer widths, input first: [784, 512, 512, 10] is two hidden layers of 512.
    pub layers: Vec<usize>,
    /// After each hidden layer: one for all, or a list of one per hidden layer.
    #[serde(default = "default_activation")]
    pub activation: Activations,
    #[serde(default = "default_loss")]
    pub loss: LossKind,
    /// Huber's δ, in the targets' units as the loss sees them (standardized with
    /// `data.normalize_y = "standard"`).
    #[serde(default = "default_huber_delta")]
    pub huber_delta: f64,
    /// Label smoothing ε (Keras' `CategoricalCrossentropy(label_smoothing=ε)` and
    /// `BinaryCrossentropy(label_smoothing=ε)`, PyTorch's `CrossEntropyLoss(label_smoothing=ε)`):
    /// softmax's target (1 − ε)·one-hot + ε/classes, binary cross-entropy's t·(1 − ε) + ε/2, in
    /// training and evaluation's loss alike. 0: none (and not written, so jobs without it keep
    /// their fingerprint).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub label_smoothing: f64,
    /// `loss = "quantile"`'s τ, from 0 to 1 exclusive (0.5: the median). Not written when
    /// unset, so jobs without it keep their fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantile: Option<f64>,
    /// How the weights start (`Init`; Keras' `kernel_initializer`). Default glorot_uniform,
    /// not written then, so jobs without it keep their fingerprint.
    #[serde(default, skip_serializing_if = "is_default_init")]
    pub init: Init,
    /// Dropout after every hidden activation: one rate for all, or one per hidden layer
    /// (0 = none). Training only; off in eval, predict and ONNX.
    #[serde(default)]
    pub dropout: Dropout,
    /// Each class's factor on its rows' loss in training (Keras' `class_weight`): a list, a
    /// table by class number or name, or "balanced". None: every class 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_weights: Option<ClassWeights>,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

fn default_huber_delta() -> f64 {
    DEFAULT_HUBER_DELTA
}

fn default_activation() -> Activations {
    PerLayer::All(Activation::Relu)
}
fn default_loss() -> LossKind {
    LossKind::SoftmaxCrossEntropy
}

impl ModelCfg {
    /// The dropout rate after each hidden layer (`layers.len() − 2` of them).
    pub fn dropout_rates(&self) -> Vec<f32> {
        let hidden = self.layers.len().saturating_sub(2);
        self.dropout.per_hidden(hidden).into_iter().map(|p| p as f32).collect()
    }

    /// The log's words for the options set beside activation and loss: `, init he_normal`,
    /// `, label smoothing 0.1` (empty for the defaults).
    pub fn describe_options(&self) -> String {
        let mut s = String::new();
        if self.init != Init::default() {
            s += &format!(", init {}", self.init.name());
        }
        if self.label_smoothing > 0.0 {
            s += &format!(", label smoothing {}", self.label_smoothing);
        }
        if self.loss == LossKind::Quantile {
            s += &format!(", quantile {}", self.quantile.unwrap_or(DEFAULT_QUANTILE));
        }
        s
    }

    /// The loss with its parameters.
    pub fn loss(&self) -> Loss {
        Loss {
            kind: self.loss,
            huber_delta: self.huber_delta as f32,
            quantile: self.quantile.unwrap_or(DEFAULT_QUANTILE) as f32,
            label_smoothing: self.label_smoothing as f32,
        }
    }

    pub(super) fn validate(&self, origin: &str) -> Result<()> {
        let bad = |msg: String| Err(Error::config(origin, "model.layers", msg));
        let m = self;
        let l = limits::LAYER_COUNT;
        if m.layers.len() < 2 || m.layers.len() as u64 > l.1 {
            return bad(format!(
                "needs at least an input and an output width, got {:?} (allowed: {} to {} widths)",
                abbreviate(&m.layers),
                l.0,
                l.1
            ));
        }
        let w = limits::LAYER_WIDTH;
        if let Some(i) = m.layers.iter().position(|&v| v == 0) {
            return bad(format!("width {i} is 0; every layer needs at least one unit (allowed: {} to {})", w.0, w.1));
        }
        if let Some(i) = m.layers.iter().position(|&v| v as u64 > w.1) {
            return bad(format!("width {i} is {}; allowed: {} to {}", m.layers[i], w.0, w.1));
        }
        let n_params: u128 = m.layers.windows(2).map(|p| (p[0] as u128 + 1) * p[1] as u128).sum();
        if n_params > limits::MAX_PARAMS as u128 {
            return bad(format!(
                "{:?} has {n_params} parameters; at most {} are allowed (4 TiB of float32 parameters)",
                abbreviate(&m.layers),
                limits::MAX_PARAMS
            ));
        }
        if m.loss == LossKind::SoftmaxCrossEntropy && *m.layers.last().unwrap() < 2 {
            return bad("softmax_cross_entropy needs at least 2 output classes".into());
        }
        let hidden = self.layers.len() - 2;
        let rates = self.dropout.given();
        // A list of one value per hidden layer (model.dropout, model.activation) must have that many.
        let per_layer = |field: &str, given: usize, noun: &str, fix: &str| -> Result<()> {
            if given == hidden {
                return Ok(());
            }
            Err(Error::config(
                origin,
                field,
                format!(
                    "lists {given} {noun}, and model.layers {:?} has {hidden} hidden layers; {fix}",
                    abbreviate(&self.layers)
                ),
            ))
        };
        if let PerLayer::Each(v) = &self.dropout {
            per_layer("model.dropout", v.len(), "rates", "give one rate per hidden layer, or one number for all")?;
        }
        if let PerLayer::Each(v) = &self.activation {
            per_layer(
                "model.activation",
                v.len(),
                "activations",
                "give one per hidden layer (the output layer has none: its outputs go to the loss), or one name for all",
            )?;
        }
        if let Some(p) = rates.iter().find(|p| !(p.is_finite() && (0.0..=MAX_DROPOUT).contains(*p))) {
            return Err(Error::config(
                origin,
                "model.dropout",
                format!(
                    "has rate {p}; a dropout rate is the share of units dropped, from 0 (none) up to {MAX_DROPOUT}"
                ),
            ));
        }
        if !(self.huber_delta.is_finite() && self.huber_delta > 0.0 && self.huber_delta <= 1e30) {
            return Err(Error::config(
                origin,
                "model.huber_delta",
                format!("is {}; Huber's δ must be a positive number (1.0 is Keras' default)", self.huber_delta),
            ));
        }
        let eps = self.label_smoothing;
        if !(eps.is_finite() && (0.0..=1.0).contains(&eps)) {
            return Err(Error::config(
                origin,
                "model.label_smoothing",
                format!("is {eps}; label smoothing is a share from 0 (none) to 1 (0.1 is common)"),
            ));
        }
        if eps > 0.0 && self.loss.targets() == Targets::Regression {
            return Err(Error::config(
                origin,
                "model.label_smoothing",
                format!(
                    "smooths class or 0/1 labels, and model.loss = \"{}\" has regression targets; it works \
                     with softmax_cross_entropy and binary_cross_entropy (remove it, or change the loss)",
                    self.loss.name()
                ),
            ));
        }
        match (self.quantile, self.loss) {
            (Some(q), LossKind::Quantile) if !(q > 0.0 && q < 1.0) => {
                return Err(Error::config(
                    origin,
                    "model.quantile",
                    format!("is {q}; a quantile is a share between 0 and 1, both excluded (0.5: the median, 0.9: the 90th percentile)"),
                ))
            }
            (Some(q), kind) if kind != LossKind::Quantile => {
                return Err(Error::config(
                    origin,
                    "model.quantile",
                    format!(
                        "({q}) is read by loss = \"quantile\" only, and model.loss is \"{}\": set loss = \"quantile\" \
                         or remove it",
                        kind.name()
                    ),
                ))
            }
            _ => {}
        }
        if let Some(w) = &self.class_weights {
            let classes = *self.layers.last().expect("checked above");
            w.check(classes, self.loss == LossKind::SoftmaxCrossEntropy)
                .map_err(|m| Error::config(origin, "model.class_weights", m))?;
        }
        Ok(())
    }
}
