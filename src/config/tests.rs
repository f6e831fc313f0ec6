//! Tests of the job file: defaults, strictness, --set and environment overrides.
//!
//! Must not: touch files or MPI.

use super::env::env_overrides;
use super::*;

const MIN: &str = "[data]\ntrain = \"t.h5\"\n[model]\nlayers = [4, 3]\n";

fn field_of(r: Result<Job>) -> String {
    match r {
        Err(Error::Config { field, .. }) => field,
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[test]
fn minimal_job_gets_defaults() {
    let j = Job::parse("job", MIN, &[]).unwrap();
    assert_eq!(j.training.epochs, 1);
    assert_eq!(j.model.activation, Activation::Relu.into());
    assert_eq!(j.data.x_dataset, "x");
    assert_eq!(j.distribution.fusion_threshold_mb, 64.0);
}

/// `training.threads`: "auto" by default, a number, or "auto" written out; a word that is
/// neither, 0 or a negative count is an error naming the field and both forms.
#[test]
fn threads_are_auto_or_a_count() {
    use crate::config::Threads;
    assert_eq!(Job::parse("job", MIN, &[]).unwrap().training.threads, Threads::Auto);
    let t = |v: &str| Job::parse("job", MIN, &[format!("training.threads={v}")]).unwrap().training.threads;
    assert_eq!(t("4"), Threads::Fixed(4));
    assert_eq!(t("\"auto\""), Threads::Auto);
    for bad in ["\"many\"", "0", "-2", "65"] {
        assert_eq!(field_of(Job::parse("job", MIN, &[format!("training.threads={bad}")])), "training.threads", "{bad}");
    }
    let (_, msg) = msg_of(Job::parse("job", MIN, &["training.threads=\"many\"".into()]));
    assert!(msg.contains("\"auto\"") && msg.contains("thread count"), "{msg}");
}

#[test]
fn unknown_key_is_an_error_naming_it() {
    let f = field_of(Job::parse("job", &format!("{MIN}[training]\nepochz = 3\n"), &[]));
    assert!(f.contains("training"), "{f}");
}

#[test]
fn set_overrides_and_typos() {
    let j = Job::parse("job", MIN, &["training.epochs=5".into(), "model.activation=tanh".into()]).unwrap();
    assert_eq!(j.training.epochs, 5);
    assert_eq!(j.model.activation, Activation::Tanh.into());
    assert_eq!(field_of(Job::parse("job", MIN, &["optimizer.lr=0".into()])), "optimizer.lr");
    assert_eq!(field_of(Job::parse("job", MIN, &["optimizer.lr=-1".into()])), "optimizer.lr");
    assert_eq!(field_of(Job::parse("job", MIN, &["training.batch_size=0".into()])), "training.batch_size");
    assert_eq!(field_of(Job::parse("job", MIN, &["model.activation=mish".into()])), "model.activation");
    assert_eq!(field_of(Job::parse("job", MIN, &["model.layers=[4, 0, 3]".into()])), "model.layers");
    assert!(field_of(Job::parse("job", MIN, &["model.depth=3".into()])).contains("model"));
}

#[test]
fn environment_overrides_job_file_and_set_overrides_environment() {
    let env = |k: &str| match k {
        "HVTRAIN_FUSION_THRESHOLD" => Some("2097152".to_string()),
        "HVTRAIN_OVERLAP" => Some("0".to_string()),
        "HVTRAIN_COMPRESSION" => Some("bf16".to_string()),
        _ => None,
    };
    let (mut sets, used) = env_overrides("job", env).unwrap();
    assert_eq!(used.len(), 3);
    sets.push("distribution.compression=fp16".into());
    let j = Job::parse("job", MIN, &sets).unwrap();
    assert_eq!(j.distribution.fusion_threshold_mb, 2.0);
    assert!(!j.distribution.overlap);
    assert_eq!(j.distribution.compression, Compression::Fp16);
    let bad = env_overrides("job", |k| (k == "HVTRAIN_OVERLAP").then(|| "maybe".to_string()));
    assert!(matches!(bad, Err(Error::Config { field, .. }) if field == "distribution.overlap"));
    let bad = Job::parse("job", MIN, &["distribution.compression=fp8".into()]);
    assert_eq!(field_of(bad), "distribution.compression");
}

#[test]
fn fingerprint_changes_with_config() {
    let a = Job::parse("job", MIN, &[]).unwrap();
    let b = Job::parse("job", MIN, &["optimizer.lr=0.5".into()]).unwrap();
    assert_eq!(a.fingerprint(), Job::parse("other", MIN, &[]).unwrap().fingerprint());
    assert_ne!(a.fingerprint(), b.fingerprint());
}

/// `model.activation`: one name for every hidden layer, or a list of one per hidden layer
/// (the list's length checked, its names as strict as one name's, with the hint); the one
/// name is written back as it was, so old jobs keep their fingerprint.
#[test]
fn dropout_is_one_rate_or_one_per_hidden_layer() {
    use super::model::PerLayer;
    const DEEP: &str = "[data]\ntrain = \"t.h5\"\n[model]\nlayers = [4, 8, 8, 3]\n";
    let j = Job::parse("job", DEEP, &["model.dropout=[0.1, 0]".into()]).unwrap();
    assert_eq!(j.model.dropout, PerLayer::Each(vec![0.1, 0.0]));
    assert_eq!(j.model.dropout_rates(), vec![0.1f32, 0.0]);
    let one = Job::parse("job", DEEP, &["model.dropout=0.25".into()]).unwrap();
    assert_eq!(one.model.dropout_rates(), vec![0.25f32, 0.25]);
    assert_eq!(Job::parse("job", DEEP, &["model.dropout=0".into()]).unwrap().model.dropout, PerLayer::All(0.0));
    // A rate that is not a number says what was expected.
    let (field, msg) = msg_of(Job::parse("job", DEEP, &["model.dropout=\"half\"".into()]));
    assert_eq!(field, "model.dropout");
    assert!(msg.contains("invalid type: string \"half\", expected f64"), "{msg}");
    let (field, msg) = msg_of(Job::parse("job", DEEP, &["model.dropout=[0.1]".into()]));
    assert_eq!(field, "model.dropout");
    assert!(msg.contains("lists 1 rates") && msg.contains("2 hidden layers"), "{msg}");
}

#[test]
fn activation_is_one_name_or_one_per_hidden_layer() {
    use super::model::PerLayer;
    const DEEP: &str = "[data]\ntrain = \"t.h5\"\n[model]\nlayers = [4, 8, 8, 3]\n";
    let j = Job::parse("job", DEEP, &["model.activation=[\"relu\", \"tanh\"]".into()]).unwrap();
    assert_eq!(j.model.activation, PerLayer::Each(vec![Activation::Relu, Activation::Tanh]));
    assert_eq!(activation_names(&j.model.activation.as_given()), "relu,tanh");
    let one = Job::parse("job", DEEP, &["model.activation=\"swish\"".into()]).unwrap();
    assert_eq!(one.model.activation, PerLayer::All(Activation::Silu));
    assert_eq!(toml::to_string(&one.model).unwrap().lines().nth(1), Some("activation = \"silu\""));
    let (field, msg) = msg_of(Job::parse("job", DEEP, &["model.activation=[\"relu\"]".into()]));
    assert_eq!(field, "model.activation");
    assert!(msg.contains("lists 1 activations") && msg.contains("2 hidden layers"), "{msg}");
    let (field, msg) = msg_of(Job::parse("job", DEEP, &["model.activation=[\"relu\", \"rleu\"]".into()]));
    assert_eq!(field, "model.activation[1]");
    assert!(msg.contains("rleu") && msg.contains("did you mean `relu`"), "{msg}");
    assert_eq!(field_of(Job::parse("job", DEEP, &["model.activation=3".into()])), "model.activation");
}

fn msg_of(r: Result<Job>) -> (String, String) {
    match r {
        Err(Error::Config { field, msg, .. }) => (field, msg),
        other => panic!("expected a config error, got {other:?}"),
    }
}

/// Every numeric key: its bounds are accepted, the values just outside (and NaN, inf, negative
/// where the type allows them) are refused with an error naming the key and the allowed range.
#[test]
fn every_numeric_field_is_bounded() {
    // (key, accepted values, refused values, a fragment of the allowed range, other --set needed)
    let cases: &[(&str, &[&str], &[&str], &str, &[&str])] = &[
        ("training.epochs", &["1", "1000000"], &["0", "1000001"], "at least 1 and at most 1000000", &[]),
        (
            "training.batch_size",
            &["1", "1048576"],
            &["0", "1048577"],
            "at least 1 and at most 1048576 samples per rank",
            &[],
        ),
        (
            "training.accumulate",
            &["1", "65536"],
            &["0", "65537"],
            "at least 1 and at most 65536 micro-batches per optimizer step",
            &[],
        ),
        (
            "training.log_every",
            &["0", "1", "1000000000"],
            &["1000000001"],
            "0 (off) or at least 1 and at most 1e9",
            &[],
        ),
        (
            "output.tensorboard_every_steps",
            &["0", "1", "1000000000"],
            &["1000000001"],
            "0 (off) or at least 1 and at most 1e9",
            &[],
        ),
        (
            "training.progress_seconds",
            &["0", "0.001", "31536000"],
            &["0.0009", "31536001", "-1", "nan", "inf", "1e20"],
            "0 (off) or at least 0.001 and at most 31536000 seconds",
            &[],
        ),
        (
            "optimizer.lr",
            &["1e-12", "1e30"],
            &["0", "-1", "1.1e30", "nan", "inf"],
            "greater than 0 and at most 1e30",
            &[],
        ),
        ("optimizer.momentum", &["0", "0.999"], &["-0.1", "1", "nan"], "at least 0 and less than 1", &[]),
        (
            "optimizer.trust_coefficient",
            &["1e-9", "1e6"],
            &["0", "-1", "2e6", "nan"],
            "greater than 0 and at most 1000000",
            &[],
        ),
        ("optimizer.power", &["0.5", "100"], &["0", "101", "nan"], "greater than 0 and at most 100", &[]),
        ("optimizer.global_clipnorm", &["1e-9", "1e30"], &["0", "-1", "inf"], "greater than 0 and at most 1e30", &[]),
        ("optimizer.ema", &["1e-6", "0.9999"], &["0", "1", "-0.1", "nan"], "greater than 0 and less than 1", &[]),
        ("optimizer.beta1", &["0", "0.999"], &["-0.1", "1", "nan"], "at least 0 and less than 1", &[]),
        ("optimizer.beta2", &["0", "0.9999"], &["-0.1", "1", "nan"], "at least 0 and less than 1", &[]),
        ("optimizer.rho", &["0", "0.99"], &["-0.1", "1", "nan"], "at least 0 and less than 1", &[]),
        ("optimizer.eps", &["1e-30", "1"], &["0", "1e-31", "1.5", "nan", "-1e-8"], "at least 1e-30 and at most 1", &[]),
        (
            "optimizer.weight_decay",
            &["0", "1000"],
            &["-1e-9", "1000.5", "nan", "inf"],
            "at least 0 and at most 1000",
            &[],
        ),
        (
            "optimizer.warmup_steps",
            &["0", "1000000000"],
            &["1000000001"],
            "0 (off) or at least 1 and at most 1e9 steps",
            &[],
        ),
        (
            "distribution.fusion_threshold_mb",
            &["0", "0.0002", "8192"],
            &["-1", "8193", "nan", "inf"],
            "at least 0 and at most 8192 MiB",
            &[],
        ),
        (
            "distribution.first_bucket_mb",
            &["0", "8192"],
            &["-0.5", "8192.5", "nan", "inf"],
            "at least 0 and at most 8192 MiB",
            &[],
        ),
        (
            "distribution.watchdog_seconds",
            &["1", "8", "3600"],
            &["0", "0.0005", "0.99", "-3", "3601", "1e20", "nan", "inf"],
            "at least 1 and at most 3600 seconds without a heartbeat",
            &[],
        ),
        (
            "distribution.check_every",
            &["0", "1000000000"],
            &["1000000001"],
            "0 (off) or at least 1 and at most 1e9 steps",
            &[],
        ),
        (
            "distribution.autotune_steps",
            &["3", "10000"],
            &["0", "2", "10001"],
            "at least 3 and at most 10000 steps per candidate",
            &[],
        ),
        (
            "checkpoint.every_steps",
            &["0", "1000000000000"],
            &["1000000000001"],
            "0 (off) or at least 1 and at most 1e12 steps",
            &[],
        ),
        (
            "checkpoint.every_minutes",
            &["0", "0.00002", "0.0003", "525600"],
            &["0.00001", "525601", "-1", "nan", "inf"],
            "0 (off) or at least 2e-5 and at most 525600 minutes",
            &[],
        ),
        ("checkpoint.keep", &["0", "1", "1000000"], &["1000001"], "at least 0 and at most 1000000 checkpoints", &[]),
        (
            "data.shuffle_block",
            &["1", "1048576"],
            &["0", "1048577"],
            "at least 1 and at most 1048576 rows",
            &["data.shuffle_window=16777216"],
        ),
        (
            "data.shuffle_window",
            &["1", "16777216"],
            &["0", "16777217"],
            "at least 1 and at most 16777216 rows",
            &["data.shuffle_block=1"],
        ),
        ("data.cache_mb", &["0", "0.5", "1024", "1e6"], &["-1", "nan", "inf"], "MiB >= 0 (0: no cache)", &[]),
    ];
    for (key, good, bad, range, with) in cases {
        let sets = |v: &str| -> Vec<String> {
            with.iter().map(|s| s.to_string()).chain(std::iter::once(format!("{key}={v}"))).collect()
        };
        for v in *good {
            if let Err(e) = Job::parse("job", MIN, &sets(v)) {
                panic!("{key} = {v} must be accepted: {e}");
            }
        }
        for v in *bad {
            let (field, msg) = msg_of(Job::parse("job", MIN, &sets(v)));
            assert_eq!(field, *key, "{key} = {v}: {msg}");
            // Out-of-type values (a float for a count) are serde's errors; ours name the range.
            assert!(msg.contains(range), "{key} = {v}: the message must give the range {range:?}: {msg}");
            assert!(msg.contains("got "), "{key} = {v}: the message must give the value: {msg}");
        }
    }
    // Counts given as negative numbers or fractions are refused by their type, naming the key.
    for key in ["training.epochs", "checkpoint.keep", "distribution.check_every", "checkpoint.every_steps"] {
        for v in ["-1", "1.5", "1e20"] {
            assert_eq!(field_of(Job::parse("job", MIN, &[format!("{key}={v}")])), key, "{key} = {v}");
        }
    }
}

#[test]
fn the_watchdog_of_the_issue_is_refused_clearly() {
    for v in ["1e20", "0.0005"] {
        let (field, msg) = msg_of(Job::parse("job", MIN, &[format!("distribution.watchdog_seconds={v}")]));
        assert_eq!(field, "distribution.watchdog_seconds");
        assert_eq!(msg, format!("must be at least 1 and at most 3600 seconds without a heartbeat, got {v}"));
    }
}

#[test]
fn model_layers_are_bounded() {
    let layers = |v: &str| Job::parse("job", MIN, &[format!("model.layers={v}")]);
    assert!(layers("[4, 16777216, 3]").is_ok());
    assert!(layers("[32766, 65536]").is_ok(), "2^31 - 65536 parameters");
    assert!(layers("[32767, 65536]").is_ok(), "2^31 parameters: MPI's 32-bit counts no longer bound the model");
    assert!(layers("[65536, 65536, 65536, 3]").is_ok(), "8.6e9 parameters");
    let wide = format!("[{}]", vec!["2"; 1024].join(", "));
    assert!(layers(&wide).is_ok(), "1024 widths");
    let cases: &[(String, &str)] = &[
        ("[4]".into(), "allowed: 2 to 1024 widths"),
        (format!("[{}]", vec!["2"; 1025].join(", ")), "allowed: 2 to 1024 widths"),
        ("[4, 0, 3]".into(), "width 1 is 0; every layer needs at least one unit (allowed: 1 to 16777216)"),
        ("[4, 16777217, 3]".into(), "width 1 is 16777217; allowed: 1 to 16777216"),
        ("[16777216, 65537]".into(), "has 1099528470529 parameters; at most 1099511627776 are allowed"),
    ];
    for (v, want) in cases {
        let (field, msg) = msg_of(layers(v));
        assert_eq!(field, "model.layers");
        assert!(msg.contains(want), "model.layers = {}: {msg}", &v[..v.len().min(40)]);
    }
}

/// The HVTRAIN_* variables are checked against the same bounds, naming the variable, the key
/// and the range (in the variable's unit).
#[test]
fn environment_values_are_bounded() {
    let one =
        |var: &'static str, value: &'static str| env_overrides("job", move |k| (k == var).then(|| value.to_string()));
    let ok = [
        ("HVTRAIN_WATCHDOG_SECONDS", "1", "distribution.watchdog_seconds=1.0"),
        ("HVTRAIN_WATCHDOG_SECONDS", "6", "distribution.watchdog_seconds=6.0"),
        ("HVTRAIN_CHECK_EVERY", "0", "distribution.check_every=0"),
        ("HVTRAIN_CHECK_EVERY", "1000000000", "distribution.check_every=1000000000"),
        ("HVTRAIN_FUSION_THRESHOLD", "0", "distribution.fusion_threshold_mb=0"),
        ("HVTRAIN_FUSION_THRESHOLD", "8589934592", "distribution.fusion_threshold_mb=8192"),
        ("HVTRAIN_FIRST_BUCKET", "1048576", "distribution.first_bucket_mb=1"),
        ("HVTRAIN_AUTOTUNE", "1", "distribution.autotune=true"),
        ("HVTRAIN_HIERARCHICAL_ALLREDUCE", "0", "distribution.hierarchical=false"),
    ];
    for (var, value, want) in ok {
        let (sets, _) = one(var, value).unwrap_or_else(|e| panic!("{var}={value}: {e}"));
        assert_eq!(sets, [want]);
        Job::parse("job", MIN, &sets).unwrap_or_else(|e| panic!("{var}={value}: {e}"));
    }
    let bad = [
        ("HVTRAIN_WATCHDOG_SECONDS", "1e20", "at least 1 and at most 3600 seconds without a heartbeat, got 1e20"),
        ("HVTRAIN_WATCHDOG_SECONDS", "0.0005", "at least 1 and at most 3600 seconds without a heartbeat, got 0.0005"),
        ("HVTRAIN_WATCHDOG_SECONDS", "nan", "got NaN"),
        ("HVTRAIN_WATCHDOG_SECONDS", "soon", "expected a number"),
        ("HVTRAIN_CHECK_EVERY", "1000000001", "0 (off) or at least 1 and at most 1e9 steps, got 1000000001"),
        ("HVTRAIN_CHECK_EVERY", "1.5", "expected a whole number, 0 (off) or at least 1 and at most 1e9 steps"),
        ("HVTRAIN_CHECK_EVERY", "-1", "expected a whole number"),
        ("HVTRAIN_FUSION_THRESHOLD", "-1", "at least 0 and at most 8.589934592e9 bytes, got -1"),
        ("HVTRAIN_FUSION_THRESHOLD", "8589934593", "at most 8.589934592e9 bytes"),
        ("HVTRAIN_FIRST_BUCKET", "inf", "at most 8.589934592e9 bytes, got inf"),
    ];
    let keys = [
        ("HVTRAIN_WATCHDOG_SECONDS", "distribution.watchdog_seconds"),
        ("HVTRAIN_CHECK_EVERY", "distribution.check_every"),
        ("HVTRAIN_FUSION_THRESHOLD", "distribution.fusion_threshold_mb"),
        ("HVTRAIN_FIRST_BUCKET", "distribution.first_bucket_mb"),
    ];
    for (var, value, want) in bad {
        match one(var, value) {
            Err(Error::Config { field, msg, .. }) => {
                let key = keys.iter().find(|k| k.0 == var).unwrap().1;
                assert_eq!(field, key, "{var}={value}");
                assert!(msg.contains(&format!("environment variable {var}=")), "{var}={value}: {msg}");
                assert!(msg.contains(want), "{var}={value}: want {want:?} in {msg}");
            }
            other => panic!("{var}={value}: expected an error, got {other:?}"),
        }
    }
}

#[test]
fn liveness_limits_have_bounds_and_errors_name_the_field() {
    let j = Job::parse("job", MIN, &[]).unwrap();
    assert_eq!((j.distribution.watchdog_seconds, j.distribution.stall_seconds), (8.0, 600.0));
    let j = Job::parse("job", MIN, &["distribution.stall_seconds=5".into()]).unwrap();
    assert_eq!(j.distribution.stall_seconds, 5.0);
    for bad in ["0", "-3", "0.5", "1e9", "nan", "inf"] {
        let r = Job::parse("job", MIN, &[format!("distribution.stall_seconds={bad}")]);
        assert_eq!(field_of(r), "distribution.stall_seconds", "stall_seconds = {bad}");
    }
    for bad in ["0", "0.5", "7200"] {
        let r = Job::parse("job", MIN, &[format!("distribution.watchdog_seconds={bad}")]);
        assert_eq!(field_of(r), "distribution.watchdog_seconds", "watchdog_seconds = {bad}");
    }
    let env = |k: &str| (k == "HVTRAIN_STALL_SECONDS").then(|| "42".to_string());
    let (sets, _) = env_overrides("job", env).unwrap();
    assert_eq!(sets, vec!["distribution.stall_seconds=42.0".to_string()]);
}

#[test]
fn parallel_block_defaults_bounds_and_layouts() {
    let j = Job::parse("job", MIN, &[]).unwrap();
    assert_eq!(j.parallel, ParallelCfg { tensor: 1, pipeline: 1, micro_batches: 1 });
    let deep = "[data]\ntrain = \"t.h5\"\n[model]\nlayers = [4, 6, 3, 5, 2]\n";
    let j = Job::parse("job", deep, &["parallel.tensor=3".into()]).unwrap();
    assert_eq!(j.parallel.tensor, 3);
    let msg = |r: Result<Job>| match r {
        Err(Error::Config { field, msg, .. }) => (field, msg),
        other => panic!("expected a config error, got {other:?}"),
    };
    // Split widths are layers[1] and layers[3] (6 and 5); layers[2] = 3 is not split.
    let (f, m) = msg(Job::parse("job", deep, &["parallel.tensor=6".into()]));
    assert_eq!(f, "parallel.tensor");
    assert!(m.contains("larger than model.layers[3] = 5"), "{m}");
    let (f, m) = msg(Job::parse("job", MIN, &["parallel.tensor=2".into()]));
    assert!(f == "parallel.tensor" && m.contains("model.layers = [4, 3] has no stage with two layers"), "{m}");
    // Pipelines: at most one stage per layer; tensor pairs within each stage.
    let j = Job::parse("job", deep, &["parallel.pipeline=4".into(), "parallel.micro_batches=4".into()]).unwrap();
    assert_eq!((j.parallel.pipeline, j.parallel.micro_batches), (4, 4));
    let (f, m) = msg(Job::parse("job", deep, &["parallel.pipeline=5".into()]));
    assert_eq!(f, "parallel.pipeline");
    assert!(m.contains("5 pipeline stage(s) for a model of 4 dense layer(s)") && m.contains("pipeline ≤ 4"), "{m}");
    let (f, m) = msg(Job::parse("job", deep, &["parallel.pipeline=4".into(), "parallel.tensor=2".into()]));
    assert!(f == "parallel.tensor" && m.contains("no stage with two layers") && m.contains("fewer stages"), "{m}");
    let (f, m) = msg(Job::parse("job", deep, &["parallel.micro_batches=33".into(), "training.batch_size=32".into()]));
    assert_eq!(f, "parallel.micro_batches");
    assert!(m.contains("larger than training.batch_size = 32"), "{m}");
    for bad in ["parallel.tensor=0", "parallel.pipeline=0", "parallel.micro_batches=0", "parallel.tensor=5000"] {
        let (f, m) = msg(Job::parse("job", deep, &[bad.into()]));
        assert!(bad.starts_with(&f) && m.contains("must be at least 1"), "{bad}: {f}: {m}");
    }
    assert!(field_of(Job::parse("job", deep, &["parallel.data=2".into()])).contains("parallel"));
}

#[test]
fn x_scale_and_offset() {
    let j = Job::parse("job", MIN, &[]).unwrap();
    assert_eq!((j.data.x_scale, j.data.x_offset), (1.0, 0.0));
    let j = Job::parse("job", MIN, &["data.x_scale=0.00392156862745098".into(), "data.x_offset=-0.5".into()]).unwrap();
    assert_eq!((j.data.x_scale, j.data.x_offset), (1.0 / 255.0, -0.5));
    for bad in ["data.x_scale=0", "data.x_scale=nan", "data.x_scale=inf", "data.x_scale=1e31"] {
        assert_eq!(field_of(Job::parse("job", MIN, &[bad.into()])), "data.x_scale", "{bad}");
    }
    assert_eq!(field_of(Job::parse("job", MIN, &["data.x_offset=-inf".into()])), "data.x_offset");
    assert_eq!(field_of(Job::parse("job", MIN, &["data.x_offset=\"1\"".into()])), "data.x_offset");
}

#[test]
fn clipping_keys_and_the_modes_that_refuse_them() {
    let deep = "[data]\ntrain = \"t.h5\"\n[model]\nlayers = [4, 6, 3, 5, 2]\n";
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let j = Job::parse("job", deep, &set(&["optimizer.global_clipnorm=1.0"])).unwrap();
    assert_eq!((j.optimizer.global_clipnorm, j.optimizer.clipnorm), (Some(1.0), None));
    assert!(j.optimizer.clips());
    for bad in ["optimizer.global_clipnorm=0", "optimizer.clipnorm=-1", "optimizer.clipnorm=nan"] {
        let f = field_of(Job::parse("job", deep, &set(&[bad])));
        assert_eq!(f, bad.split('=').next().unwrap(), "{bad}");
    }
    let (f, m) = msg_of(Job::parse("job", deep, &set(&["optimizer.global_clipnorm=1", "optimizer.clipnorm=1"])));
    assert!(f == "optimizer.clipnorm" && m.contains("choose one"), "{f}: {m}");
    // Norms over tensor shards and pipeline stages (summed over the replica), by value anywhere.
    for mode in ["parallel.tensor=2", "parallel.pipeline=2"] {
        for clip in ["optimizer.global_clipnorm=1", "optimizer.clipnorm=1"] {
            assert!(Job::parse("job", deep, &set(&[clip, mode])).is_ok(), "{clip} {mode}");
        }
    }
    assert!(Job::parse("job", deep, &set(&["optimizer.clipvalue=1", "parallel.tensor=2"])).is_ok());
    // Parameter servers clip every way (the global norm: the servers exchange theirs).
    let ps = "distribution.strategy=\"parameter_server\"";
    for clip in ["optimizer.clipnorm=1", "optimizer.clipvalue=1", "optimizer.global_clipnorm=1"] {
        assert!(Job::parse("job", deep, &set(&[clip, ps])).is_ok(), "{clip} with servers");
    }
    // The moving average: not with parameter servers (naming both keys), with the rest.
    let (f, m) = msg_of(Job::parse("job", deep, &set(&["optimizer.ema=0.99", ps])));
    assert!(f == "optimizer.ema" && m.contains("parameter_server"), "{f}: {m}");
    for other in ["parallel.tensor=2", "parallel.pipeline=2", "distribution.shard=\"parameters\""] {
        assert!(Job::parse("job", deep, &set(&["optimizer.ema=0.99", other])).is_ok(), "ema with {other}");
    }
    // LARS and LAMB with tensor shards: their norms summed over the tensor group.
    for kind in ["lars", "lamb"] {
        for layout in ["parallel.tensor=2", "parallel.pipeline=2"] {
            let k = format!("optimizer.kind=\"{kind}\"");
            assert!(Job::parse("job", deep, &set(&[k.as_str(), layout])).is_ok(), "{kind} {layout}");
        }
    }
    // Adasum: whole tensors and exact float32 gradients between ranks that reduce together.
    let ada = "distribution.reduction=\"adasum\"";
    for (other, says) in [
        ("parallel.tensor=2", "with parallel.tensor = 2"),
        ("distribution.compression=\"bf16\"", "with compression = \"bf16\""),
        ("distribution.strategy=\"parameter_server\"", "parameter_server"),
    ] {
        let (f, m) = msg_of(Job::parse("job", deep, &set(&[ada, other])));
        assert!(f == "distribution.reduction" && m.contains(says), "{other}: {f}: {m}");
    }
    assert!(Job::parse("job", deep, &set(&[ada, "parallel.pipeline=2"])).is_ok());
    assert!(Job::parse("job", deep, &set(&["distribution.reduction=\"sum\""])).is_err());
    let ps = ["distribution.autotune=true", "distribution.strategy=\"parameter_server\""];
    assert_eq!(msg_of(Job::parse("job", deep, &set(&ps))).0, "distribution.autotune");
    let hier = "distribution.hierarchical=true";
    let (f, m) = msg_of(Job::parse("job", deep, &set(&[hier, "distribution.compression=\"fp16\""])));
    assert!(f == "distribution.compression" && m.contains("with hierarchical = true"), "{f}: {m}");
    assert_eq!(msg_of(Job::parse("job", deep, &set(&[hier, ada]))).0, "distribution.reduction");
    assert!(Job::parse("job", deep, &set(&[hier, "parallel.tensor=2"])).is_ok());
}

#[test]
fn on_device_takes_auto_on_off() {
    assert_eq!(Job::parse("job", MIN, &[]).unwrap().data.on_device, crate::config::OnDevice::Auto);
    for (v, want) in [("on", crate::config::OnDevice::On), ("off", crate::config::OnDevice::Off)] {
        assert_eq!(Job::parse("job", MIN, &[format!("data.on_device=\"{v}\"")]).unwrap().data.on_device, want);
    }
    assert_eq!(field_of(Job::parse("job", MIN, &["data.on_device=\"yes\"".into()])), "data.on_device");
}

#[test]
fn sweep_defaults_and_ranges() {
    let sweep = "[sweep.space]\n\"optimizer.lr\" = { log_uniform = [1e-4, 0.3] }\n\"model.width\" = [64, 128]\n";
    // The MIN job has no validation data: val_loss, the default metric, is refused.
    let f = field_of(Job::parse("job", &format!("{MIN}{sweep}"), &[]));
    assert_eq!(f, "sweep.metric");
    let with_val = MIN.replace("[data]\n", "[data]\nvalidation_split = 0.1\n");
    let j = Job::parse("job", &format!("{with_val}{sweep}"), &[]).unwrap();
    let s = j.sweep.unwrap();
    assert_eq!((s.trials, s.ranks_per_trial, s.eta, s.min_epochs, s.seed), (0, 1, 3, 1, 1));
    assert_eq!((s.scheduler, s.sampler, s.goal()), (SchedulerKind::Asha, Sampler::Random, Goal::Minimize));
    assert_eq!(s.trial_count(), 16);
    assert_eq!(s.keep_checkpoints, crate::config::KeepCheckpoints::Best);
    assert_eq!(s.space["optimizer.lr"], Range::LogUniform(1e-4, 0.3));
    assert_eq!(s.space["model.width"], Range::Choice(vec![toml::Value::Integer(64), toml::Value::Integer(128)]));
    // Bad ranges name the key, quoted as in the job file.
    for bad in [
        "{ log_uniform = [0.0, 0.3] }",
        "{ uniform = [0.3, 0.1] }",
        "{ int = [5, 1] }",
        "{ log_int = [0, 8] }",
        "[]",
        "{ normal = [0, 1] }",
        "{ uniform = [0, 1], int = [0, 1] }",
        "3",
    ] {
        let text = format!("{with_val}[sweep.space]\n\"optimizer.lr\" = {bad}\n");
        assert_eq!(field_of(Job::parse("job", &text, &[])), "sweep.space.\"optimizer.lr\"", "{bad}");
    }
    let grid = format!(
        "{with_val}[sweep]\nsampler = \"grid\"\n[sweep.space]\n\"a.b\" = [1, 2, 3]\n\"c.d\" = {{ int = [1, 4] }}\n"
    );
    assert_eq!(Job::parse("job", &grid, &[]).unwrap().sweep.unwrap().trial_count(), 12);
    let too_many = grid.replace("sampler = \"grid\"", "sampler = \"grid\"\ntrials = 13");
    assert_eq!(field_of(Job::parse("job", &too_many, &[])), "sweep.trials");
    let acc = format!("{with_val}[sweep]\nmetric = \"val_accuracy\"\n{sweep}");
    assert_eq!(Job::parse("job", &acc, &[]).unwrap().sweep.unwrap().goal(), Goal::Maximize);
    for m in ["val_auc", "test_average_precision", "val_macro_f1", "val_r2"] {
        assert!(crate::config::higher_is_better(m), "{m}");
    }
    for m in ["val_loss", "val_mae", "val_rmse", "train_loss"] {
        assert!(!crate::config::higher_is_better(m), "{m}");
    }
    let auc = format!("{with_val}[sweep]\nmetric = \"val_auc\"\n{sweep}");
    assert_eq!(Job::parse("job", &auc, &[]).unwrap().sweep.unwrap().goal(), Goal::Maximize);
    let regression =
        format!("{with_val}[sweep]\nmetric = \"val_auc\"\n{sweep}").replace("[model]\n", "[model]\nloss = \"mse\"\n");
    assert_eq!(field_of(Job::parse("job", &regression, &[])), "sweep.metric", "{regression}");
    for (extra, field) in [
        ("ranks_per_trial = 0", "sweep.ranks_per_trial"),
        ("eta = 1", "sweep.eta"),
        ("min_epochs = 2", "sweep.min_epochs"),
        ("metric = \"val_mae\"", "sweep.metric"),
        ("metric = \"test_loss\"", "sweep.metric"),
        ("metric = \"loss\"", "sweep.metric"),
        ("keep_checkpoints = \"last\"", "sweep.keep_checkpoints"),
    ] {
        let text = format!("{with_val}[sweep]\n{extra}\n{sweep}");
        assert_eq!(field_of(Job::parse("job", &text, &[])), field, "{extra}");
    }
}

/// Keras' spellings of the losses parse as hvtrain's, and the job's fingerprint (which resumes
/// compare) is the same whichever spelling the file uses.
#[test]
fn keras_loss_names_are_the_same_loss() {
    // MIN ends in [model]: the line goes there.
    let with = |loss: &str| Job::parse("job", &format!("{MIN}loss = \"{loss}\"\n"), &[]).unwrap();
    for (keras, ours) in [
        ("mean_squared_error", "mse"),
        ("mean_absolute_error", "mae"),
        ("sparse_categorical_crossentropy", "softmax_cross_entropy"),
        ("binary_crossentropy", "binary_cross_entropy"),
        ("logcosh", "log_cosh"),
        ("mean_absolute_percentage_error", "mape"),
        ("mean_squared_logarithmic_error", "msle"),
        ("pinball", "quantile"),
    ] {
        let (a, b) = (with(keras), with(ours));
        assert_eq!(a.model.loss.name(), ours, "{keras}");
        assert_eq!(a.fingerprint(), b.fingerprint(), "{keras}");
    }
}
