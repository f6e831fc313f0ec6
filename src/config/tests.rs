//! Tests of the job file: defaults, strictness, --set and environment overrides.

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
    assert_eq!(j.model.activation, Activation::Relu);
    assert_eq!(j.data.x_dataset, "x");
    assert_eq!(j.distribution.fusion_threshold_mb, 64.0);
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
    assert_eq!(j.model.activation, Activation::Tanh);
    assert_eq!(field_of(Job::parse("job", MIN, &["optimizer.lr=0".into()])), "optimizer.lr");
    assert_eq!(field_of(Job::parse("job", MIN, &["optimizer.lr=-1".into()])), "optimizer.lr");
    assert_eq!(field_of(Job::parse("job", MIN, &["training.batch_size=0".into()])), "training.batch_size");
    assert_eq!(field_of(Job::parse("job", MIN, &["model.activation=swish".into()])), "model.activation");
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
    assert_eq!(sets, vec!["distribution.stall_seconds=42".to_string()]);
}
