//! Staleness of the gradients a server applied: for a gradient of worker w's step t,
//! `staleness` = (t − 1) − c, where c is the last step that *every* worker's gradient had
//! been applied for when w pulled the parameters it computed on (0 in synchronous training;
//! at most K under the bound K), and `lag` = the updates applied to the bucket between that
//! pull and this gradient's application (the classical asynchronous-SGD delay τ).
//!
//! With `optimizer.global_clipnorm` the first owning server also counts the global gradient
//! norms it clipped by (every server computes the same ones).
//!
//! Must not: send messages.

/// Staleness values 0..HIST-1 are counted one by one; larger ones together.
pub const HIST: usize = 16;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub counts: [u64; HIST + 1],
    /// The same for the lag (updates).
    pub lags: [u64; HIST + 1],
    pub max: u64,
    pub lag_sum: u64,
    pub lag_max: u64,
    /// Global gradient norms (`optimizer.global_clipnorm`): their sum, count, and how many
    /// were above the limit.
    pub norm_sum: f64,
    pub norms: u64,
    pub norms_clipped: u64,
}

impl Stats {
    pub fn record(&mut self, staleness: u64, lag: u64) {
        self.counts[(staleness as usize).min(HIST)] += 1;
        self.lags[(lag as usize).min(HIST)] += 1;
        self.max = self.max.max(staleness);
        self.lag_sum += lag;
        self.lag_max = self.lag_max.max(lag);
    }
    pub fn record_norm(&mut self, norm: f64, clipped: bool) {
        self.norm_sum += norm;
        self.norms += 1;
        self.norms_clipped += u64::from(clipped);
    }
    pub fn applied(&self) -> u64 {
        self.counts.iter().sum()
    }
    pub fn merge(&mut self, o: &Stats) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts).chain(self.lags.iter_mut().zip(&o.lags)) {
            *a += b;
        }
        self.max = self.max.max(o.max);
        self.lag_sum += o.lag_sum;
        self.lag_max = self.lag_max.max(o.lag_max);
        self.norm_sum += o.norm_sum;
        self.norms += o.norms;
        self.norms_clipped += o.norms_clipped;
    }
    /// As u32 words (each u64 as two), for a message.
    pub fn to_words(&self) -> Vec<u32> {
        let tail = [self.max, self.lag_sum, self.lag_max, self.norm_sum.to_bits(), self.norms, self.norms_clipped];
        let all = self.counts.iter().chain(&self.lags).chain(&tail);
        all.flat_map(|&v| [v as u32, (v >> 32) as u32]).collect()
    }
    pub fn from_words(w: &[u32]) -> Stats {
        let v: Vec<u64> = w.chunks(2).map(|c| c[0] as u64 | (c[1] as u64) << 32).collect();
        let mut s = Stats::default();
        let h = HIST + 1;
        s.counts.copy_from_slice(&v[..h]);
        s.lags.copy_from_slice(&v[h..2 * h]);
        (s.max, s.lag_sum, s.lag_max) = (v[2 * h], v[2 * h + 1], v[2 * h + 2]);
        (s.norm_sum, s.norms, s.norms_clipped) = (f64::from_bits(v[2 * h + 3]), v[2 * h + 4], v[2 * h + 5]);
        s
    }
    /// "staleness (steps) of 2400 applied gradient(s): 0: 1200, 1: 1100, 2: 100; max 2; lag
    /// (updates): 0: 1000, 1: 900, 2: 500; mean 0.79, max 2".
    pub fn describe(&self) -> String {
        let n = self.applied();
        let hist = |h: &[u64]| -> String {
            let parts: Vec<String> = h
                .iter()
                .enumerate()
                .filter(|(_, &c)| c > 0)
                .map(|(i, c)| if i == HIST { format!(">={HIST}: {c}") } else { format!("{i}: {c}") })
                .collect();
            if parts.is_empty() {
                "none".into()
            } else {
                parts.join(", ")
            }
        };
        let norms = if self.norms > 0 {
            format!(
                "; global gradient norm mean {:.4} over {} update(s), {} clipped",
                self.norm_sum / self.norms as f64,
                self.norms,
                self.norms_clipped
            )
        } else {
            String::new()
        };
        format!(
            "staleness (steps) of {n} applied gradient(s): {}; max {}; lag (updates): {}; mean {:.2}, max {}{norms}",
            hist(&self.counts),
            self.max,
            hist(&self.lags),
            self.lag_sum as f64 / n.max(1) as f64,
            self.lag_max
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_describe() {
        let mut s = Stats::default();
        s.record(0, 0);
        s.record(2, 3);
        s.record(40, 1 << 33);
        let t = Stats::from_words(&s.to_words());
        assert_eq!(s, t);
        assert_eq!(t.max, 40);
        let d = t.describe();
        assert!(!d.contains("norm"), "{d}");
        s.record_norm(1.5, true);
        s.record_norm(0.25, false);
        let t = Stats::from_words(&s.to_words());
        assert_eq!(s, t);
        assert!(
            t.describe().ends_with("; global gradient norm mean 0.8750 over 2 update(s), 1 clipped"),
            "{}",
            t.describe()
        );
        assert!(
            d.contains("of 3 applied gradient(s): 0: 1, 2: 1, >=16: 1; max 40; lag (updates): 0: 1, 3: 1, >=16: 1;"),
            "{d}"
        );
    }
}
