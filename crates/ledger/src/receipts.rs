//! Receipts: what approved or keyed calls did, bounded in count and age.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use tether_contract::writes::Receipt;
use tether_rpc::lock;

use crate::snapshot::{ms, since, ReceiptSnapshot};

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

    /// The receipts kept now, oldest first, for another holder.
    pub(crate) fn export(&self) -> Vec<ReceiptSnapshot> {
        let now = Instant::now();
        lock(&self.list)
            .iter()
            .filter(|(at, _)| now.duration_since(*at) < self.max_age)
            .map(|(at, receipt)| ReceiptSnapshot {
                age_ms: ms(now.duration_since(*at)),
                receipt: receipt.clone(),
            })
            .collect()
    }

    /// Takes over another holder's receipts (oldest first), within the cap and age.
    pub(crate) fn import(&self, receipts: Vec<ReceiptSnapshot>) {
        let now = Instant::now();
        let mut list = lock(&self.list);
        for r in receipts {
            if self.cap == 0 || Duration::from_millis(r.age_ms) >= self.max_age {
                continue;
            }
            list.push_back((since(now, r.age_ms), r.receipt));
        }
        list.make_contiguous().sort_by_key(|(at, _)| *at);
        while list.len() > self.cap {
            list.pop_front();
        }
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
