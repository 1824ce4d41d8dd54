//! Counters for every fallback and event, and the one way to record a fallback.
//!
//! A fallback — a call refused, a frame dropped, a degraded setting — must be
//! both counted and logged, so an operator sees the rate on a dashboard and
//! the reason in the log. [`fallback!`] does both in one step, and a
//! [`Fallback`] counter has no other public way to move: a fallback counted
//! silently does not compile. Plain events (sessions opened, calls started)
//! are ordinary [`Counter`]s.
//!
//! [`counters!`] declares a crate's counter struct with both groups, its
//! Prometheus registration, a snapshot by name and the help text for docs.

#[doc(hidden)]
pub use prometheus_client::encoding::text::encode;
pub use prometheus_client::metrics::counter::Counter;
#[doc(hidden)]
pub use prometheus_client::registry::Registry;

/// The content type of an OpenMetrics exposition, as every `/metrics` here serves it.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
#[doc(hidden)]
pub use tracing;

/// A counter that moves only through [`fallback!`], together with its log line.
#[derive(Debug, Default, Clone)]
pub struct Fallback(Counter);

impl Fallback {
    /// Times this fallback was taken.
    pub fn get(&self) -> u64 {
        self.0.get()
    }

    /// The underlying counter, for registration.
    pub fn counter(&self) -> Counter {
        self.0.clone()
    }

    /// Use [`fallback!`]: it logs as it counts.
    #[doc(hidden)]
    pub fn record(&self, n: u64) {
        self.0.inc_by(n);
    }
}

/// Counts a fallback and logs why, in one step.
///
/// `fallback!(counters.outbound_full, warn, session = %id, "queue full; frame dropped")`
/// counts one; `fallback!(counters.tools_dropped; n, warn, ...)` counts `n`
/// with one line. The level is any `tracing` macro name.
#[macro_export]
macro_rules! fallback {
    ($counter:expr; $n:expr, $level:ident, $($log:tt)+) => {{
        $crate::Fallback::record(&$counter, $n);
        $crate::tracing::$level!($($log)+);
    }};
    ($counter:expr, $level:ident, $($log:tt)+) => {{
        $crate::Fallback::record(&$counter, 1);
        $crate::tracing::$level!($($log)+);
    }};
}

/// Declares a counter struct: `events { … }` are plain counters, `fallbacks
/// { … }` move only through [`fallback!`]. Each field's doc comment is its
/// Prometheus help text.
#[macro_export]
macro_rules! counters {
    (
        $(#[$meta:meta])* $vis:vis struct $ty:ident;
        events { $( $(#[doc = $edoc:literal])* $event:ident ),* $(,)? }
        fallbacks { $( $(#[doc = $fdoc:literal])* $fallback:ident ),* $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Default)]
        $vis struct $ty {
            $( $(#[doc = $edoc])* pub $event: $crate::Counter, )*
            $( $(#[doc = $fdoc])* pub $fallback: $crate::Fallback, )*
        }

        impl $ty {
            /// Adds one to an event counter (a fallback goes through `fallback!`).
            pub fn bump(counter: &$crate::Counter) {
                counter.inc();
            }

            /// All counters by name, for reports and tests.
            pub fn snapshot(&self) -> std::collections::BTreeMap<&'static str, u64> {
                let mut out = std::collections::BTreeMap::new();
                $( out.insert(stringify!($event), self.$event.get()); )*
                $( out.insert(stringify!($fallback), self.$fallback.get()); )*
                out
            }

            /// Registers every counter (as `<prefix>_<name>_total`).
            pub fn register(&self, registry: &mut $crate::Registry) {
                $( registry.register(stringify!($event), concat!($($edoc),*).trim(), self.$event.clone()); )*
                $( registry.register(stringify!($fallback), concat!($($fdoc),*).trim(), self.$fallback.counter()); )*
            }

            /// The OpenMetrics text of these counters alone (as `<prefix>_<name>_total`, `# EOF` last).
            pub fn exposition(&self, prefix: &str) -> String {
                let mut registry = $crate::Registry::with_prefix(prefix);
                self.register(&mut registry);
                let mut out = String::new();
                // Writing into a String cannot fail.
                let _ = $crate::encode(&mut out, &registry);
                out
            }

            /// Every counter name with its help text, for docs and their test.
            pub fn describe() -> Vec<(&'static str, &'static str)> {
                vec![
                    $( (stringify!($event), concat!($($edoc),*).trim()), )*
                    $( (stringify!($fallback), concat!($($fdoc),*).trim()), )*
                ]
            }

            /// Names of the fallback counters (each one moves with a log line).
            pub fn fallbacks() -> &'static [&'static str] {
                &[ $( stringify!($fallback), )* ]
            }

            /// Reads one counter by name; None when no counter has that name.
            pub fn try_get(&self, name: &str) -> Option<u64> {
                self.snapshot().get(name).copied()
            }

            /// Reads one counter by name, for tests and reports that name counters in code.
            ///
            /// # Panics
            ///
            /// When no counter has that name: a misspelt name must fail its test, not
            /// read as a counter that stayed at 0.
            pub fn get(&self, name: &str) -> u64 {
                match self.try_get(name) {
                    Some(n) => n,
                    None => panic!("no counter named {name:?}"),
                }
            }
        }
    };
}

#[cfg(test)]
#[allow(unreachable_pub, dead_code)]
mod tests {
    counters! {
        /// Test counters.
        pub struct TestCounters;
        events {
            /// Things that happened.
            happened,
        }
        fallbacks {
            /// Things that went wrong.
            went_wrong,
        }
    }

    #[test]
    fn a_fallback_counts_and_names_itself() {
        let c = TestCounters::default();
        fallback!(c.went_wrong, debug, "went wrong once");
        fallback!(c.went_wrong; 2, debug, count = 2, "went wrong twice more");
        TestCounters::bump(&c.happened);
        assert_eq!(c.get("went_wrong"), 3);
        assert_eq!(c.get("happened"), 1);
        assert_eq!(TestCounters::fallbacks(), ["went_wrong"]);
        assert_eq!(TestCounters::describe()[1], ("went_wrong", "Things that went wrong."));
    }

    #[test]
    #[should_panic(expected = "no counter named")]
    fn a_misspelt_counter_name_fails_instead_of_reading_0() {
        TestCounters::default().get("went_wrogn");
    }
}
