//! Receipts: what approved or keyed calls did, bounded in count and age.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use tether_contract::writes::Receipt;
use tether_rpc::lock;

/// The receipts of one scope, oldest first.
#[derive(Debug)]
pub struct Receipts {
    cap: usize,
    max_age: Duration,
    list: Mutex<VecDeque<(Instant, Receipt)>>,
}

impl Receipts {
    /// No receipts yet; at most `cap`, each kept `max_age`.
    pub fn new(cap: usize, max_age: Duration) -> Receipts {
        Receipts { cap, max_age, list: Mutex::default() }
    }

    /// Keeps `receipt`, forgetting the oldest past the cap or age.
    pub fn push(&self, receipt: Receipt) {
        if self.cap == 0 {
            return;
        }
        let now = Instant::now();
        let mut list = lock(&self.list);
        while list.front().is_some_and(|(at, _)| now.duration_since(*at) >= self.max_age)
            || list.len() >= self.cap
        {
            list.pop_front();
        }
        list.push_back((now, receipt));
    }

    /// The receipts kept now, oldest first.
    pub fn recent(&self) -> Vec<Receipt> {
        let now = Instant::now();
        lock(&self.list)
            .iter()
            .filter(|(at, _)| now.duration_since(*at) < self.max_age)
            .map(|(_, r)| r.clone())
            .collect()
    }
}
