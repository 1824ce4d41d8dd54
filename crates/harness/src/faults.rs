//! Fault mixes for simulated devices: which misbehaviour each call gets.
//!
//! A mix is written as comma-separated `name=weight` pairs, for example
//! `answer=80,error=5,silent=1,late=2,twice=2,disconnect=1,navigate=4,malformed=2,oversize=1,flood=2`.
//! Each call draws one fault by weight from a seeded generator, so a run with
//! the same seed makes the same choices. `answer` latencies are uniform in
//! `0..=answer_max_ms` (default 20 ms).

use crate::error::FaultSpecError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// SplitMix64: tiny, fast, deterministic; for simulation only, never for secrets.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// One misbehaviour a call can get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Answer within the latency distribution.
    Answer,
    /// Answer with an `isError` result.
    Error,
    /// Never answer.
    Silent,
    /// Answer after the edge's 7 s leg.
    Late,
    /// Answer twice.
    Twice,
    /// Drop the socket mid-call (the fleet reconnects the device).
    Disconnect,
    /// Change the catalog (new seq) and answer.
    Navigate,
    /// Send a malformed frame, then answer.
    Malformed,
    /// Answer with a frame over the transport ceiling (the edge closes 1009).
    Oversize,
    /// Send a burst of `list_changed`, then answer.
    Flood,
}

impl Fault {
    /// Every fault, in spec order.
    pub const ALL: [Fault; 10] = [
        Fault::Answer,
        Fault::Error,
        Fault::Silent,
        Fault::Late,
        Fault::Twice,
        Fault::Disconnect,
        Fault::Navigate,
        Fault::Malformed,
        Fault::Oversize,
        Fault::Flood,
    ];

    /// Its name in a spec.
    pub const fn name(self) -> &'static str {
        match self {
            Fault::Answer => "answer",
            Fault::Error => "error",
            Fault::Silent => "silent",
            Fault::Late => "late",
            Fault::Twice => "twice",
            Fault::Disconnect => "disconnect",
            Fault::Navigate => "navigate",
            Fault::Malformed => "malformed",
            Fault::Oversize => "oversize",
            Fault::Flood => "flood",
        }
    }
}

/// A weighted fault mix shared by a fleet, with counts of what was injected.
#[derive(Debug)]
pub struct FaultMix {
    weights: Vec<(Fault, u64)>,
    total: u64,
    /// Longest honest answer latency.
    pub answer_max: Duration,
    /// How long a late answer waits.
    pub late_after: Duration,
    injected: [AtomicU64; 10],
    late_sent: AtomicU64,
    late_settled: AtomicU64,
    rng: Mutex<SplitMix64>,
}

impl FaultMix {
    /// Parses a spec such as `answer=90,late=5,silent=5`; `seed` fixes the draws.
    pub fn parse(spec: &str, seed: u64) -> Result<FaultMix, FaultSpecError> {
        let mut weights = Vec::new();
        let mut answer_max = Duration::from_millis(20);
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) =
                part.split_once('=').ok_or_else(|| FaultSpecError::NotNameWeight(part.to_owned()))?;
            let n: u64 = value.trim().parse().map_err(|_| FaultSpecError::NotWhole(part.to_owned()))?;
            if name == "answer_max_ms" {
                answer_max = Duration::from_millis(n);
                continue;
            }
            let fault = Fault::ALL.into_iter().find(|f| f.name() == name.trim()).ok_or_else(|| {
                FaultSpecError::Unknown {
                    name: name.to_owned(),
                    known: Fault::ALL.map(Fault::name).join(", "),
                }
            })?;
            weights.push((fault, n));
        }
        let total = weights.iter().map(|(_, w)| w).sum();
        if total == 0 {
            return Err(FaultSpecError::NoWeight);
        }
        Ok(FaultMix {
            weights,
            total,
            answer_max,
            late_after: Duration::from_millis(7_500),
            injected: Default::default(),
            late_sent: AtomicU64::new(0),
            late_settled: AtomicU64::new(0),
            rng: Mutex::new(SplitMix64::new(seed)),
        })
    }

    /// Draws the fault for one call, and the latency if it answers honestly.
    pub fn draw(&self) -> (Fault, Duration) {
        let mut rng = match self.rng.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let mut pick = rng.below(self.total);
        let mut fault = Fault::Answer;
        for (f, w) in &self.weights {
            if pick < *w {
                fault = *f;
                break;
            }
            pick -= w;
        }
        let max_ms = u64::try_from(self.answer_max.as_millis()).unwrap_or(u64::MAX);
        let latency = Duration::from_millis(rng.below(max_ms + 1));
        drop(rng);
        if let Some(i) = Fault::ALL.iter().position(|f| *f == fault) {
            self.injected[i].fetch_add(1, Ordering::Relaxed);
        }
        (fault, latency)
    }

    /// Records that a late answer's moment came: sent, or not (its socket was gone).
    pub fn late_answer_settled(&self, sent: bool) {
        if sent {
            self.late_sent.fetch_add(1, Ordering::Relaxed);
        }
        self.late_settled.fetch_add(1, Ordering::Relaxed);
    }

    /// Late answers actually written toward the edge.
    pub fn late_sent(&self) -> u64 {
        self.late_sent.load(Ordering::Relaxed)
    }

    /// Late answers whose moment has come, sent or not.
    pub fn late_settled(&self) -> u64 {
        self.late_settled.load(Ordering::Relaxed)
    }

    /// How many calls got `fault`.
    pub fn injected(&self, fault: Fault) -> u64 {
        Fault::ALL.iter().position(|f| *f == fault).map_or(0, |i| self.injected[i].load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_draws_follow_the_weights() {
        let mix = FaultMix::parse("answer=90, late=10", 7).unwrap();
        for _ in 0..10_000 {
            mix.draw();
        }
        let late = mix.injected(Fault::Late);
        assert!((800..1200).contains(&late), "{late}");
        assert_eq!(mix.injected(Fault::Answer) + late, 10_000);
        assert!(FaultMix::parse("answer=1,bogus=2", 1).is_err());
        assert!(FaultMix::parse("answer=0", 1).is_err());
        assert!(FaultMix::parse("answer", 1).is_err());
    }

    #[test]
    fn the_same_seed_makes_the_same_choices() {
        let a = FaultMix::parse("answer=50,error=50", 42).unwrap();
        let b = FaultMix::parse("answer=50,error=50", 42).unwrap();
        let xs: Vec<_> = (0..100).map(|_| a.draw()).collect();
        let ys: Vec<_> = (0..100).map(|_| b.draw()).collect();
        assert_eq!(xs, ys);
    }
}
