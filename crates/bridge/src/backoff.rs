//! Bounded, jittered exponential backoff for restarting the server and
//! redialing the edge.
//!
//! Each retry waits a delay drawn from `[base / 2, base]`, where `base`
//! doubles from `initial` up to `max`; the jitter keeps a fleet of bridges
//! that lost one edge from redialing it in lockstep. A run that stayed
//! healthy for `healthy_after` resets the sequence, so a server that crashes
//! once a day restarts at once rather than after the cap.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// How the bridge waits between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// The first delay (before jitter).
    pub initial: Duration,
    /// The largest delay (before jitter).
    pub max: Duration,
    /// A run at least this long resets the delays to `initial`.
    pub healthy_after: Duration,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        BackoffPolicy {
            initial: Duration::from_millis(250),
            max: Duration::from_secs(30),
            healthy_after: Duration::from_secs(60),
        }
    }
}

/// One sequence of retries under a [`BackoffPolicy`].
#[derive(Debug)]
pub(crate) struct Backoff {
    policy: BackoffPolicy,
    attempt: u32,
}

impl Backoff {
    pub(crate) fn new(policy: BackoffPolicy) -> Backoff {
        Backoff { policy, attempt: 0 }
    }

    /// The delay before the next attempt, with random jitter.
    pub(crate) fn next_delay(&mut self) -> Duration {
        self.next_with(unit_random())
    }

    /// The delay before the next attempt; `unit` in `[0, 1]` places it
    /// within `[base / 2, base]`.
    fn next_with(&mut self, unit: f64) -> Duration {
        let doublings = self.attempt.min(32);
        let base = self.policy.initial.saturating_mul(1u32 << doublings.min(31)).min(self.policy.max);
        self.attempt = self.attempt.saturating_add(1);
        let half = base / 2;
        half + half.mul_f64(unit.clamp(0.0, 1.0))
    }

    /// Records how long the last run lasted: a healthy one starts the delays over.
    pub(crate) fn settle(&mut self, lived: Duration) {
        if lived >= self.policy.healthy_after {
            self.attempt = 0;
        }
    }
}

/// A number in `[0, 1]` from the standard library's per-process random keys
/// (jitter needs no cryptographic quality, and no dependency for it).
fn unit_random() -> f64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(0x9e37_79b9_7f4a_7c15);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn delays_double_to_the_cap_within_their_jitter_band() {
        let mut b = Backoff::new(BackoffPolicy::default());
        // (unit, expected delay): unit 1 is the full base, unit 0 half of it.
        let cases = [
            (1.0, ms(250)),
            (1.0, ms(500)),
            (0.0, ms(500)),
            (1.0, ms(2_000)),
            (1.0, ms(4_000)),
            (1.0, ms(8_000)),
            (1.0, ms(16_000)),
            (1.0, ms(30_000)),
            (0.0, ms(15_000)),
            (0.5, ms(22_500)),
        ];
        for (i, (unit, want)) in cases.into_iter().enumerate() {
            assert_eq!(b.next_with(unit), want, "attempt {i}");
        }
        for _ in 0..100 {
            assert!(b.next_with(1.0) <= ms(30_000), "never past the cap");
        }
    }

    #[test]
    fn a_healthy_run_starts_over_and_a_short_one_does_not() {
        let mut b = Backoff::new(BackoffPolicy::default());
        for _ in 0..5 {
            b.next_with(1.0);
        }
        b.settle(Duration::from_secs(59));
        assert_eq!(b.next_with(1.0), ms(8_000));
        b.settle(Duration::from_secs(60));
        assert_eq!(b.next_with(1.0), ms(250));
    }

    #[test]
    fn random_jitter_stays_in_its_band() {
        let mut b = Backoff::new(BackoffPolicy::default());
        let d = b.next_delay();
        assert!(d >= ms(125) && d <= ms(250), "{d:?}");
        let u = unit_random();
        assert!((0.0..=1.0).contains(&u));
    }
}
