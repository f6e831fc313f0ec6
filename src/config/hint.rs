//! "Did you mean": a job file's unknown key or value, answered with the closest name the table
//! takes (`epoch` → `epochs`, `Relu` → `relu`, `[optimiser]` → `[optimizer]`), or with where a
//! key that Keras and PyTorch users write elsewhere lives here (`training.learning_rate` →
//! `optimizer.lr`).
//!
//! Must not: change what a job file means: it only adds words to serde's error.

/// Keys as Keras' `fit`/`compile` and PyTorch users name them, and the key that does the same
/// here: a bare name matches in any table, a dotted one (`optimizer.alpha`) in its own only.
const ELSEWHERE: &[(&str, &str)] = &[
    ("epsilon", "optimizer.eps"),
    ("optimizer.alpha", "optimizer.rho (PyTorch's RMSprop alpha; Keras' rho)"),
    ("use_ema", "optimizer.ema (β, e.g. 0.999)"),
    ("gamma", "optimizer.factor (schedule multistep or plateau; optimizer.decay_rate for step and exponential)"),
    ("milestone", "optimizer.milestones (epochs, with schedule = \"multistep\")"),
    ("boundaries", "optimizer.milestones (epochs, with schedule = \"multistep\")"),
    ("first_decay_steps", "optimizer.decay_steps (cosine_restarts' first period)"),
    ("t_0", "optimizer.decay_steps (cosine_restarts' first period)"),
    ("eta_min", "optimizer.min_lr"),
    ("ema_momentum", "optimizer.ema"),
    ("learning_rate", "optimizer.lr"),
    ("lr", "optimizer.lr"),
    ("momentum", "optimizer.momentum"),
    ("weight_decay", "optimizer.weight_decay"),
    ("optimizer", "optimizer.kind"),
    ("batch", "training.batch_size"),
    ("batch_size", "training.batch_size"),
    ("epochs", "training.epochs"),
    ("seed", "training.seed"),
    ("activation", "model.activation"),
    ("loss", "model.loss"),
    ("class_weight", "model.class_weights"),
    ("class_weights", "model.class_weights"),
    ("layers", "model.layers"),
    ("units", "model.layers"),
    ("hidden_layers", "model.layers"),
    ("validation_split", "data.validation_split"),
    ("shuffle", "data.shuffle"),
    ("patience", "training.early_stopping"),
    ("early_stopping", "training.early_stopping"),
    ("clipnorm", "optimizer.clipnorm"),
    ("clipvalue", "optimizer.clipvalue"),
    ("steps_per_epoch", "training.epochs (an epoch is one pass over the training rows)"),
    ("num_workers", "training.threads"),
    ("threads", "training.threads"),
    ("device", "training.device"),
    ("precision", "training.precision"),
    ("mixed_precision", "training.precision = \"bf16\""),
    ("checkpoint_dir", "output.dir"),
    ("log_dir", "output.dir"),
    ("tensorboard", "output.tensorboard"),
];

/// serde's message `msg` about the key at dotted path `field`, with a hint appended when
/// there is one.
pub fn with_hint(field: &str, msg: &str) -> String {
    match hint(field, msg) {
        Some(h) => format!("{msg}; {h}"),
        None => msg.to_string(),
    }
}

fn hint(field: &str, msg: &str) -> Option<String> {
    let (what, rest) = if let Some(r) = msg.strip_prefix("unknown field `") {
        ("key", r)
    } else if let Some(r) = msg.strip_prefix("unknown variant `") {
        ("value", r)
    } else {
        return None;
    };
    let (unknown, rest) = rest.split_once('`')?;
    // toml adds where: "... expected one of `a`, `b` in `training`".
    let rest = rest.rsplit_once(" in `").map_or(rest, |(r, _)| r);
    let expected: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    let close = expected
        .iter()
        .map(|e| (distance(&unknown.to_lowercase(), &e.to_lowercase()), *e))
        .filter(|&(d, e)| d <= 2 && 2 * d < unknown.chars().count().min(e.chars().count()).max(1) + 1)
        .min();
    if let Some((_, e)) = close {
        return Some(format!("did you mean `{e}`?"));
    }
    if what == "key" {
        let table = field.rsplit_once('.').map_or("", |(t, _)| t);
        let (_, there) =
            ELSEWHERE.iter().find(|(k, _)| k.eq_ignore_ascii_case(unknown) || k.eq_ignore_ascii_case(field))?;
        let there_table = there.split_once('.').map_or("", |(t, _)| t);
        let same = there_table == table && there.split_once('.').is_some_and(|(_, k)| k == unknown);
        if !same {
            return Some(format!("hvtrain's key for it is `{there}`"));
        }
    }
    None
}

/// Levenshtein distance over chars.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_names_and_keys_from_elsewhere_are_suggested() {
        let m = "unknown field `epoch`, expected one of `epochs`, `batch_size`, `seed` in `training`";
        assert!(with_hint("training.epoch", m).ends_with("; did you mean `epochs`?"));
        let m = "unknown variant `Relu`, expected one of `relu`, `tanh`, `gelu`, `identity`";
        assert!(with_hint("model.activation", m).ends_with("; did you mean `relu`?"));
        let m = "unknown field `optimiser`, expected one of `data`, `model`, `training`, `optimizer`";
        assert!(with_hint("optimiser", m).ends_with("; did you mean `optimizer`?"));
        let m = "unknown field `learning_rate`, expected one of `epochs`, `batch_size`";
        assert!(with_hint("training.learning_rate", m).ends_with("; hvtrain's key for it is `optimizer.lr`"));
        let m = "unknown field `lr`, expected one of `epochs`, `batch_size`";
        assert!(with_hint("training.lr", m).ends_with("; hvtrain's key for it is `optimizer.lr`"));
        // Keras' and PyTorch's optimizer names; `alpha` only in [optimizer] (RMSprop's).
        let m = "unknown field `alpha`, expected one of `kind`, `lr`, `rho` in `optimizer`";
        assert!(with_hint("optimizer.alpha", m).contains("hvtrain's key for it is `optimizer.rho"), "{m}");
        let m = "unknown field `alpha`, expected one of `layers`, `activation` in `model`";
        assert_eq!(with_hint("model.alpha", m), m);
        let m = "unknown field `epsilon`, expected one of `kind`, `lr`, `eps` in `optimizer`";
        assert!(with_hint("optimizer.epsilon", m).ends_with("; hvtrain's key for it is `optimizer.eps`"));
        let m = "unknown field `use_ema`, expected one of `kind`, `lr`, `ema` in `optimizer`";
        assert!(with_hint("optimizer.use_ema", m).contains("`optimizer.ema (β"), "{m}");
        // PyTorch's MultiStepLR and CosineAnnealingWarmRestarts names.
        let m = "unknown field `gamma`, expected one of `kind`, `lr`, `factor` in `optimizer`";
        assert!(with_hint("optimizer.gamma", m).contains("`optimizer.factor (schedule multistep"), "{m}");
        let m = "unknown field `T_0`, expected one of `kind`, `lr`, `decay_steps` in `optimizer`";
        assert!(with_hint("optimizer.T_0", m).contains("`optimizer.decay_steps (cosine_restarts'"), "{m}");
        let m = "unknown field `T_mult`, expected one of `kind`, `t_mul`, `m_mul` in `optimizer`";
        assert!(with_hint("optimizer.T_mult", m).ends_with("did you mean `t_mul`?"), "{m}");
        // Nothing close, nothing known: the message as it was.
        let m = "unknown field `trainin`, expected one of `epochs`, `batch_size` in `training`";
        assert!(!with_hint("training.trainin", m).contains("did you mean"), "the table's own name is not a key");
        let m = "unknown field `zzz`, expected one of `epochs`, `batch_size`";
        assert_eq!(with_hint("training.zzz", m), m);
        // Short names are not matched to anything two edits away.
        let m = "unknown variant `xx`, expected one of `sgd`, `adam`";
        assert_eq!(with_hint("optimizer.kind", m), m);
        assert_eq!(
            with_hint("x", "invalid type: string, expected a sequence"),
            "invalid type: string, expected a sequence"
        );
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
