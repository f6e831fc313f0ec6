//! Tests of `[optimizer]`'s schedules and the optimizer's log line: what each schedule reads,
//! its keys' checks and the errors that name them.
//!
//! Must not: touch files or MPI (the rates themselves are `optim/schedule.rs`'s tests).

use super::*;

const MIN: &str = "[data]\ntrain = \"t.h5\"\n[model]\nlayers = [4, 3]\n";

fn parse(sets: &[&str]) -> Result<Job> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Job::parse("job.toml", MIN, &sets)
}

/// The error's field and message, or a panic naming what parsed.
fn refused(sets: &[&str]) -> (String, String) {
    match parse(sets) {
        Err(Error::Config { field, msg, .. }) => (field, msg),
        other => panic!("{sets:?}: expected a config error, got {other:?}"),
    }
}

/// The log's optimizer line names the kind and the hyperparameters that kind reads, and not
/// those it ignores.
#[test]
fn the_optimizer_line_names_what_the_kind_reads() {
    let d = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        Job::parse("t", "[data]\ntrain='x'\n[model]\nlayers=[1,2]\n", &sets).unwrap().optimizer.describe()
    };
    let r = d(&["optimizer.kind='rmsprop'", "optimizer.lr=0.001", "optimizer.rho=0.95"]);
    assert_eq!(r, "optimizer rmsprop: lr 0.001, rho 0.95, eps 1e-8");
    let r = d(&["optimizer.kind='rmsprop'", "optimizer.momentum=0.9"]);
    assert_eq!(r, "optimizer rmsprop: lr 0.01, rho 0.9, eps 1e-8, momentum 0.9");
    let a = d(&[
        "optimizer.kind='adamw'",
        "optimizer.weight_decay=0.01",
        "optimizer.schedule='cosine'",
        "optimizer.ema=0.999",
    ]);
    assert!(a.starts_with("optimizer adamw: lr 0.01, beta1 0.9, beta2 0.999, eps 1e-8, weight decay 0.01"), "{a}");
    assert!(a.contains("schedule cosine") && a.contains("ema 0.999") && !a.contains("rho"), "{a}");
    let s = d(&["optimizer.momentum=0.9", "optimizer.nesterov=true", "optimizer.clipnorm=1"]);
    assert_eq!(s, "optimizer sgd: lr 0.01, momentum 0.9 (Nesterov), clipnorm 1");
}

#[test]
fn multistep_needs_increasing_milestones_and_only_multistep_reads_them() {
    let j = parse(&["optimizer.schedule='multistep'", "optimizer.milestones=[30, 60, 80]"]).unwrap();
    assert_eq!(j.optimizer.milestones, [30, 60, 80]);
    assert_eq!(j.optimizer.factor, 0.1, "PyTorch MultiStepLR's gamma");
    let line = j.optimizer.describe();
    assert!(line.ends_with("schedule multistep (× 0.1 after epochs 30, 60, 80)"), "{line}");
    for (sets, words) in [
        (&["optimizer.schedule='multistep'"][..], "milestones = [30, 60, 80]"),
        (&["optimizer.schedule='multistep'", "optimizer.milestones=[0, 3]"][..], "got [0, 3]"),
        (&["optimizer.schedule='multistep'", "optimizer.milestones=[5, 3]"][..], "increasing order"),
        (&["optimizer.schedule='multistep'", "optimizer.milestones=[3, 3]"][..], "increasing order"),
        (&["optimizer.milestones=[3]"][..], "schedule = \"multistep\" only, and schedule is \"constant\""),
    ] {
        let (field, msg) = refused(sets);
        assert_eq!(field, "optimizer.milestones", "{sets:?}: {msg}");
        assert!(msg.contains(words), "{sets:?}: {msg}");
    }
    let (field, msg) = refused(&[
        "optimizer.schedule='multistep'",
        "optimizer.milestones=[3]",
        "distribution.strategy='parameter_server'",
    ]);
    assert!(field == "optimizer.schedule" && msg.contains("schedule = \"step\""), "{field}: {msg}");
}

#[test]
fn cosine_restarts_needs_a_first_period_and_bounded_multipliers() {
    let j = parse(&["optimizer.schedule='cosine_restarts'", "optimizer.decay_steps=500", "optimizer.lr=0.1"]).unwrap();
    assert_eq!((j.optimizer.t_mul, j.optimizer.m_mul), (2.0, 1.0), "Keras' defaults");
    let line = j.optimizer.describe();
    assert!(
        line.ends_with("schedule cosine_restarts (to 0 over 500 steps, each period × 2, each restart's peak × 1)"),
        "{line}"
    );
    let (field, msg) = refused(&["optimizer.schedule='cosine_restarts'"]);
    assert!(field == "optimizer.decay_steps" && msg.contains("first_decay_steps"), "{field}: {msg}");
    for (set, field) in [
        ("optimizer.t_mul=0.5", "optimizer.t_mul"),
        ("optimizer.m_mul=0", "optimizer.m_mul"),
        ("optimizer.m_mul=1.5", "optimizer.m_mul"),
        ("optimizer.min_lr=0.5", "optimizer.min_lr"),
    ] {
        let got = refused(&["optimizer.schedule='cosine_restarts'", "optimizer.decay_steps=10", set]);
        assert_eq!(got.0, field, "{set}: {}", got.1);
    }
}

/// Every schedule's line says what it reads, so the log alone tells which curve ran.
#[test]
fn every_schedule_line_says_what_it_reads() {
    for (sets, tail) in [
        (&["optimizer.schedule='step'", "optimizer.decay_steps=100"][..], "schedule step (× 0.5 every 100 steps)"),
        (
            &["optimizer.schedule='exponential'", "optimizer.decay_steps=10", "optimizer.decay_rate=0.9"][..],
            "schedule exponential (× 0.9 per 10 steps)",
        ),
        (&["optimizer.schedule='cosine'", "optimizer.min_lr=0.001"][..], "schedule cosine (to 0.001 over the run)"),
        (
            &["optimizer.schedule='polynomial'", "optimizer.decay_steps=40", "optimizer.power=2"][..],
            "schedule polynomial (to 0 over 40 steps, power 2)",
        ),
        (
            &["optimizer.schedule='plateau'", "optimizer.patience=3"][..],
            "schedule plateau (× 0.1 after 3 epochs without improvement, floor 0)",
        ),
        (
            &["optimizer.schedule='multistep'", "optimizer.milestones=[2]"][..],
            "schedule multistep (× 0.1 after epoch 2)",
        ),
    ] {
        let line = parse(sets).unwrap().optimizer.describe();
        assert!(line.ends_with(tail), "{sets:?}: {line}");
    }
}

#[test]
fn warmup_epochs_or_warmup_steps_not_both() {
    let j = parse(&["optimizer.warmup_epochs=5"]).unwrap();
    assert!(j.optimizer.describe().ends_with("warm-up over 5 epochs"), "{}", j.optimizer.describe());
    let (field, msg) = refused(&["optimizer.warmup_epochs=5", "optimizer.warmup_steps=100"]);
    assert!(field == "optimizer.warmup_epochs" && msg.contains("choose one"), "{field}: {msg}");
    assert_eq!(refused(&["optimizer.warmup_epochs=-1"]).0, "optimizer.warmup_epochs");
    let (field, msg) = refused(&["optimizer.warmup_epochs=1", "distribution.strategy='parameter_server'"]);
    assert!(field == "optimizer.warmup_epochs" && msg.contains("warmup_steps"), "{field}: {msg}");
}

#[test]
fn one_cycle_warms_up_itself_and_bounds_its_factors() {
    let line = parse(&["optimizer.schedule='one_cycle'", "optimizer.lr=0.1"]).unwrap().optimizer.describe();
    assert!(
        line.ends_with("schedule one_cycle (from 0.004 up to 0.1 over 0.3 of the run, then down to 4e-7)"),
        "{line}"
    );
    for (set, field) in [
        ("optimizer.warmup_steps=10", "optimizer.warmup_steps"),
        ("optimizer.warmup_epochs=1", "optimizer.warmup_epochs"),
        ("optimizer.pct_start=0", "optimizer.pct_start"),
        ("optimizer.pct_start=1", "optimizer.pct_start"),
        ("optimizer.div_factor=0.5", "optimizer.div_factor"),
        ("optimizer.final_div_factor=0", "optimizer.final_div_factor"),
    ] {
        let (got, msg) = refused(&["optimizer.schedule='one_cycle'", set]);
        assert_eq!(got, field, "{set}: {msg}");
    }
    let (field, msg) = refused(&["optimizer.schedule='one_cycle'", "distribution.strategy='parameter_server'"]);
    assert!(field == "optimizer.decay_steps" && msg.contains("\"one_cycle\""), "{field}: {msg}");
}

#[test]
fn plateau_cooldown_is_in_its_line_and_bounded() {
    let line = parse(&["optimizer.schedule='plateau'", "optimizer.cooldown=2"]).unwrap().optimizer.describe();
    assert!(line.ends_with("(× 0.1 after 5 epochs without improvement, floor 0, cooldown 2 epochs)"), "{line}");
    assert_eq!(refused(&["optimizer.cooldown=-1"]).0, "optimizer.cooldown");
}
