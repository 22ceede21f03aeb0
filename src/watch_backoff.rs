//! How long a watch waits before it reconnects after an error (an API server restart, a dropped
//! connection): 0.5 s doubling up to 5 s, with jitter. kube-runtime's default grows to 30 s, and
//! while a cache is stale pods wait behind the gate with room for them (a churn run saw 11 pods
//! wait ~35 s after an API server restart); 5 s keeps a restart's cost to seconds while a
//! restarting API server still sees at most one list per watch every few seconds.
//!
//! [`reflected`] is the one way sluice builds a reflector cache on such a watch.

use std::fmt::Debug;
use std::hash::Hash;
use std::time::Duration;

use futures::Stream;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

const FIRST: Duration = Duration::from_millis(500);
/// The longest wait between two reconnections of one watch.
pub const LONGEST: Duration = Duration::from_secs(5);
/// After this long without an error the next one starts again from [`FIRST`].
const RESET_AFTER: Duration = Duration::from_secs(60);

/// The backoff of every watch sluice runs (`.backoff(watch_backoff())`).
pub fn watch_backoff() -> ResetTimerBackoff<CappedBackoff> {
    ResetTimerBackoff::new(CappedBackoff::default(), RESET_AFTER)
}

/// A reflector cache of `K` and the watch (with [`watch_backoff`]) that fills it, each object
/// trimmed by `trim` before it is cached. The cache fills only while the stream is polled.
pub fn reflected<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
) -> (
    Store<K>,
    impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store();
    let watch = watcher(api, config).backoff(watch_backoff()).modify(trim);
    (store, reflector::reflector(writer, watch))
}

/// Doubling delays from [`FIRST`] capped at [`LONGEST`], each shortened by up to a quarter at
/// random so that many watches do not reconnect in step.
pub struct CappedBackoff {
    next: Duration,
}

impl Default for CappedBackoff {
    fn default() -> Self {
        CappedBackoff { next: FIRST }
    }
}

impl Iterator for CappedBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.next;
        self.next = (self.next * 2).min(LONGEST);
        // Jitter without a random number generator: the clock's nanoseconds are spread enough.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let quarter = delay / 4;
        let jitter = quarter.mul_f64(f64::from(nanos % 1000) / 1000.0);
        Some(delay - jitter)
    }
}

impl Backoff for CappedBackoff {
    fn reset(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_five_seconds_and_start_over_after_a_reset() {
        let mut backoff = CappedBackoff::default();
        let delays: Vec<Duration> = (&mut backoff).take(8).collect();
        for (delay, ceiling_ms) in delays
            .iter()
            .zip([500, 1000, 2000, 4000, 5000, 5000, 5000, 5000])
        {
            let ceiling = Duration::from_millis(ceiling_ms);
            assert!(
                *delay <= ceiling && *delay >= ceiling * 3 / 4,
                "{delay:?} vs {ceiling:?}"
            );
        }
        backoff.reset();
        assert!(backoff.next().is_some_and(|d| d <= FIRST));
    }
}
