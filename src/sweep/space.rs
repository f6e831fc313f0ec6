//! A sweep's trials from its `[sweep.space]`: each trial's value of every key, by trial
//! number alone (random: a generator seeded by the seed and the trial number; grid: the
//! number in mixed radix over the keys; sobol: the sequence's point of that number), so a
//! resumed sweep draws the same trials as one that ran through. And the `--set` overrides
//! that make a trial's job (`model.width`/`model.depth` rewrite `model.layers`).
//!
//! Must not: run anything (pure).

use super::sobol;
use crate::config::{Range, Sampler, SweepCfg};
use crate::rng::Rng;
use toml::Value;

/// One trial's values, in the space's key order (sorted).
pub type Values = Vec<(String, Value)>;

/// Every trial's values.
pub fn sample(cfg: &SweepCfg) -> Vec<Values> {
    let n = cfg.trial_count();
    let keys: Vec<(&String, &Range)> = cfg.space.iter().collect();
    let shift: Vec<u32> = {
        let mut r = Rng::new(cfg.seed, u64::MAX);
        (0..keys.len()).map(|_| r.next_u64() as u32).collect()
    };
    (0..n)
        .map(|i| {
            let u: Vec<f64> = match cfg.sampler {
                Sampler::Random => {
                    let mut r = Rng::new(cfg.seed, i);
                    keys.iter().map(|_| r.uniform()).collect()
                }
                Sampler::Sobol => sobol::point(i, keys.len(), &shift),
                Sampler::Grid => grid_fractions(i, &keys),
            };
            keys.iter().zip(u).map(|((k, r), u)| ((*k).clone(), value(r, u))).collect()
        })
        .collect()
}

/// Grid point `i` as a fraction per key that `value` maps to the point's index (the last key
/// varies fastest).
fn grid_fractions(mut i: u64, keys: &[(&String, &Range)]) -> Vec<f64> {
    let mut u = vec![0.0; keys.len()];
    for (d, (_, r)) in keys.iter().enumerate().rev() {
        let p = r.points().expect("grid dimensions are finite (checked)");
        u[d] = ((i % p) as f64 + 0.5) / p as f64;
        i /= p;
    }
    u
}

/// The value at fraction `u` in [0, 1) of a range.
pub fn value(r: &Range, u: f64) -> Value {
    let pick = |n: u64| ((u * n as f64) as u64).min(n - 1);
    match r {
        Range::Choice(v) => v[pick(v.len() as u64) as usize].clone(),
        Range::Uniform(lo, hi) => Value::Float(lo + u * (hi - lo)),
        Range::LogUniform(lo, hi) => Value::Float((lo.ln() + u * (hi.ln() - lo.ln())).exp()),
        Range::Int(lo, hi) => Value::Integer(lo + pick((hi - lo + 1) as u64) as i64),
        Range::LogInt(lo, hi) => {
            // Uniform in log over [lo, hi + 1), then down to a whole number: each k has
            // weight ln((k + 1) / k).
            let (a, b) = ((*lo as f64).ln(), ((*hi + 1) as f64).ln());
            Value::Integer(((a + u * (b - a)).exp().floor() as i64).clamp(*lo, *hi))
        }
    }
}

/// The `--set` overrides of a trial: `key=value` in TOML syntax, with `model.width` and
/// `model.depth` folded into one `model.layers` ([inputs, width × depth, outputs], the other
/// one from `layers`, the base job's).
pub fn sets(values: &Values, layers: &[usize]) -> Vec<String> {
    let mut out = Vec::new();
    let (mut width, mut depth) = (None, None);
    for (k, v) in values {
        match k.as_str() {
            "model.width" => width = v.as_integer(),
            "model.depth" => depth = v.as_integer(),
            _ => out.push(format!("{k}={}", show(v))),
        }
    }
    if width.is_some() || depth.is_some() {
        let hidden = &layers[1..layers.len() - 1];
        let w = width.map_or(hidden.first().copied().unwrap_or(64), |w| w.max(1) as usize);
        let d = depth.map_or(hidden.len(), |d| d.max(0) as usize);
        let mut l = vec![layers[0]];
        l.extend(std::iter::repeat_n(w, d));
        l.push(layers[layers.len() - 1]);
        // No spaces: the override reads the same on a command line.
        let l: Vec<String> = l.iter().map(|w| w.to_string()).collect();
        out.push(format!("model.layers=[{}]", l.join(",")));
    }
    out
}

/// A value as the job file would have it (TOML; a float always with its point or exponent,
/// so that it stays a float).
pub fn show(v: &Value) -> String {
    match v {
        Value::Float(f) => format!("{f:?}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> SweepCfg {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn grid_visits_every_combination_once() {
        let c = cfg("sampler = \"grid\"\n[space]\n\"a\" = [1, 2, 3]\n\"b\" = { choice = [\"x\", \"y\"] }\n\"c\" = { int = [5, 6] }");
        let t = sample(&c);
        assert_eq!(t.len(), 12);
        let mut seen: Vec<String> = t.iter().map(|v| sets(v, &[1, 2]).join(" ")).collect();
        assert_eq!(seen[0], "a=1 b=\"x\" c=5");
        assert_eq!(seen[1], "a=1 b=\"x\" c=6", "the last key varies fastest");
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 12);
    }

    #[test]
    fn draws_stay_in_their_ranges_and_depend_on_the_trial_number_only() {
        for sampler in ["random", "sobol"] {
            let text = format!(
                "trials = 40\nsampler = \"{sampler}\"\nseed = 7\n[space]\n\"lr\" = {{ log_uniform = [1e-4, 0.3] }}\n\
                 \"m\" = {{ uniform = [0.5, 0.9] }}\n\"w\" = {{ log_int = [64, 1024] }}\n\"d\" = {{ int = [1, 4] }}"
            );
            let t = sample(&cfg(&text));
            assert_eq!(t.len(), 40);
            for v in &t {
                let get = |k: &str| v.iter().find(|(n, _)| n == k).unwrap().1.clone();
                let lr = get("lr").as_float().unwrap();
                assert!((1e-4..=0.3).contains(&lr), "{lr}");
                assert!((0.5..=0.9).contains(&get("m").as_float().unwrap()));
                assert!((64..=1024).contains(&get("w").as_integer().unwrap()));
                assert!((1..=4).contains(&get("d").as_integer().unwrap()));
            }
            // The log range is spread in the logarithm: some draws below 1e-2, the geometric middle.
            let low = t.iter().filter(|v| v[1].1.as_float().unwrap() < 5.5e-3).count();
            assert!((10..=30).contains(&low), "{sampler}: {low} of 40 below the log middle");
            // Another seed, other trials; the same seed and more trials: the same first ones.
            let again = sample(&cfg(&text.replace("trials = 40", "trials = 50")));
            assert_eq!(&again[..40], &t[..]);
            let other = sample(&cfg(&text.replace("seed = 7", "seed = 8")));
            assert_ne!(other[..5], t[..5]);
        }
    }

    #[test]
    fn width_and_depth_become_the_layers() {
        let v: Values = vec![("model.depth".into(), Value::Integer(3)), ("model.width".into(), Value::Integer(256))];
        assert_eq!(sets(&v, &[784, 128, 10]), vec!["model.layers=[784,256,256,256,10]".to_string()]);
        let d: Values = vec![("model.depth".into(), Value::Integer(2)), ("optimizer.lr".into(), Value::Float(0.01))];
        assert_eq!(
            sets(&d, &[784, 100, 10]),
            vec!["optimizer.lr=0.01".to_string(), "model.layers=[784,100,100,10]".into()]
        );
    }
}
