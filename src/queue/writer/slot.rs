//! What the writer keeps per object: the newest value wanted, how patient it is (urgent, or a
//! change of wording that may wait), when it may be sent, and the budget of lazy writes per round.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// How long a write this writer made is believed over an older value the watch still shows.
/// Past it, the watch's value wins again (someone else may have written since).
pub(super) const TRUST_WRITTEN_FOR: Duration = Duration::from_secs(30);
/// A change of wording only (see [`same_but_for_wording`]) waits this many status intervals after
/// the object's last write.
pub(super) const LAZY_INTERVALS: u32 = 10;
/// DynamicWorkload statuses changed in wording only that one round sends at most (20 a second at
/// the default interval). With thousands of workloads waiting, each one's "needs 1 cpu more …"
/// followed every pod of its queue every lazy interval: 183,328 status writes for 15,152 workloads
/// in Kueue's suite (BENCHMARKS.md), the API server's largest load. The oldest go first; a change
/// of phase or counts is urgent and never waits on this.
pub(super) const LAZY_WRITES_PER_ROUND: usize = 5;
/// Rounds of writes per status interval at most: a change waits for the next round (a quarter of
/// the interval here), not for the interval, unless its object was written within the interval.
pub(super) const ROUNDS_PER_INTERVAL: u32 = 4;

/// Wanted values not yet sent, being sent, and sent (the watch may not show them yet).
pub(super) struct Slot<K, V> {
    pub(super) pending: HashMap<K, Wanted<V>>,
    pub(super) sending: HashMap<K, V>,
    pub(super) written: HashMap<K, (V, Instant)>,
    /// When each object was last written (kept after the watch caught up: lazy values wait on it).
    pub(super) last_write: HashMap<K, Instant>,
    /// Objects whose write failed since the controller last asked
    /// ([`Writer::take_failed`](super::Writer::take_failed)): an incremental pass looks at them
    /// again even if nothing of theirs changed.
    pub(super) failed: HashSet<K>,
}

/// A value wanted, and how long it may wait (see [`Writer::want_workload_status`]).
pub(super) struct Wanted<V> {
    pub(super) value: V,
    pub(super) patience: Patience,
    /// When a value for this object was first wanted and not yet sent (a replacing value keeps
    /// it): a round short of write budget sends the longest-waiting first.
    pub(super) since: Instant,
    /// Goes before the others in a round short of write budget (a workload with pods waiting
    /// behind the gate: the status a user looks at).
    pub(super) first: bool,
    /// What the watch showed when it was wanted: what the API server holds, unless this writer
    /// wrote since (see [`Slot::take_due`]).
    pub(super) seen: Option<V>,
}

/// What a round sends of one object: the value, and the value the API server is believed to hold
/// (the base of a merge patch).
pub(super) struct Send<K, V> {
    pub(super) key: K,
    pub(super) value: V,
    pub(super) base: Option<V>,
}

/// How long a wanted value may wait before a round sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Patience {
    /// Sent by the next round once its object was last written the spacing ago (or never).
    Urgent,
    /// Waits until its object was last written the lazy interval ago (a change of wording only).
    Lazy,
}

impl Patience {
    /// The patience of a value that replaces an unsent one of patience `earlier`: it may wait only
    /// as long as both may (an urgent value stays urgent).
    pub(super) fn and(self, earlier: Patience) -> Patience {
        match (self, earlier) {
            (Patience::Lazy, Patience::Lazy) => Patience::Lazy,
            _ => Patience::Urgent,
        }
    }
}

/// How far apart a round's writes of one object are, at least.
#[derive(Clone, Copy, Debug)]
pub(super) struct Spacing {
    /// An urgent value waits until its object was last written this long ago.
    pub(super) urgent: Duration,
    /// A lazy value (a change of wording only) waits until its object was last written this long ago.
    pub(super) lazy: Duration,
    /// Lazy values a round takes at most (the oldest wanted first).
    pub(super) lazy_limit: usize,
}

impl<K: Eq + Hash + Clone, V: PartialEq + Clone> Slot<K, V> {
    pub(super) fn new() -> Self {
        Slot {
            pending: HashMap::new(),
            sending: HashMap::new(),
            written: HashMap::new(),
            last_write: HashMap::new(),
            failed: HashSet::new(),
        }
    }

    /// The newest value known for `key`: wanted and not yet sent, else being sent, else sent
    /// recently, else what the watch shows (`seen`).
    pub(super) fn newest(&mut self, key: &K, seen: Option<&V>) -> Option<V> {
        if let Some(wanted) = self.pending.get(key) {
            return Some(wanted.value.clone());
        }
        if let Some(value) = self.sending.get(key) {
            return Some(value.clone());
        }
        if let Some((value, at)) = self.written.get(key) {
            if seen != Some(value) && at.elapsed() < TRUST_WRITTEN_FOR {
                return Some(value.clone());
            }
            // The watch caught up (or the write is too old to trust): forget it.
            self.written.remove(key);
        }
        seen.cloned()
    }

    /// The newest value for `key` when it is not what the watch shows (`seen`): wanted, being
    /// sent, or sent and not yet shown. None: `seen` is the newest (no copy made).
    pub(super) fn newer_than_seen(&mut self, key: &K, seen: Option<&V>) -> Option<V> {
        if self.pending.is_empty() && self.sending.is_empty() && self.written.is_empty() {
            return None;
        }
        self.newest(key, seen).filter(|v| seen != Some(v))
    }

    /// Records that `value` is wanted; returns whether that is news (a write is due). A value that
    /// replaces an unsent one may wait only as long as both may (see [`Patience::and`]); `first`:
    /// it goes before the others when a round is short of budget.
    pub(super) fn want(
        &mut self,
        key: K,
        value: V,
        seen: Option<&V>,
        patience: Patience,
        first: bool,
    ) -> bool {
        if self.newest(&key, seen).as_ref() == Some(&value) {
            return false;
        }
        let (patience, since) = match self.pending.get(&key) {
            Some(earlier) => (patience.and(earlier.patience), earlier.since),
            None => (patience, Instant::now()),
        };
        self.pending.insert(
            key,
            Wanted {
                value,
                patience,
                since,
                first,
                seen: seen.cloned(),
            },
        );
        true
    }

    /// Takes what is due for a round, at most `limit` values, those of workloads with pods waiting
    /// first, then those waiting longest: urgent values and lazy ones whose object was last written
    /// the spacing ago or more (or never). They count as being sent from now on; the rest stay
    /// wanted (a newer value replaces one still waiting: one write instead of two). Each comes with
    /// the value the API server is believed to hold: the one this writer wrote last (while
    /// trusted), else what the watch showed.
    pub(super) fn take_due(&mut self, spacing: Spacing, limit: usize) -> Vec<Send<K, V>> {
        let keep = spacing.lazy.max(spacing.urgent);
        self.last_write.retain(|_, at| at.elapsed() < keep);
        let last_write = &self.last_write;
        let (mut due, mut lazy): (Vec<_>, Vec<_>) = self
            .pending
            .iter()
            .filter(|(key, wanted)| {
                let wait = match wanted.patience {
                    Patience::Urgent => spacing.urgent,
                    Patience::Lazy => spacing.lazy,
                };
                last_write.get(*key).is_none_or(|at| at.elapsed() >= wait)
            })
            .map(|(key, wanted)| ((!wanted.first, wanted.since), key.clone(), wanted.patience))
            .partition(|(_, _, patience)| *patience == Patience::Urgent);
        if lazy.len() > spacing.lazy_limit {
            lazy.select_nth_unstable_by_key(spacing.lazy_limit, |((_, since), _, _)| *since);
            lazy.truncate(spacing.lazy_limit);
        }
        due.append(&mut lazy);
        let mut due: Vec<((bool, Instant), K)> = due
            .into_iter()
            .map(|(order, key, _)| (order, key))
            .collect();
        if due.len() > limit {
            due.select_nth_unstable_by_key(limit, |(order, _)| *order);
            due.truncate(limit);
        }
        due.into_iter()
            .map(|(_, key)| key)
            .filter_map(|key| {
                let wanted = self.pending.remove(&key)?;
                let base = match self.written.get(&key) {
                    Some((value, at)) if at.elapsed() < TRUST_WRITTEN_FOR => Some(value.clone()),
                    _ => wanted.seen,
                };
                self.sending.insert(key.clone(), wanted.value.clone());
                Some(Send {
                    key,
                    value: wanted.value,
                    base,
                })
            })
            .collect()
    }

    /// The write of `key` ended: remembered as written when it succeeded; forgotten when it
    /// failed, so that the next pass wants it again.
    pub(super) fn sent(&mut self, key: K, ok: bool) {
        if self.sending.remove(&key).is_some_and(|value| {
            if ok {
                self.last_write.insert(key.clone(), Instant::now());
                self.written.insert(key.clone(), (value, Instant::now()));
            }
            !ok
        }) {
            self.failed.insert(key);
        }
    }
}

/// How many DynamicWorkload status writes a round may send: a token bucket refilled at
/// `per_second`, holding at most one second's worth. Statuses are the ledger's bulk (a few per
/// workload), each a write the API server pays for; under a burst of workloads the bucket runs
/// dry and statuses wait, the newest replacing older ones (often one write per workload's start).
pub(super) struct WriteBudget {
    /// 0: no limit.
    pub(super) per_second: f64,
    pub(super) tokens: f64,
    pub(super) refilled: Instant,
}

impl WriteBudget {
    pub(super) fn new(per_second: f64) -> Self {
        let per_second = if per_second.is_finite() && per_second > 0.0 {
            per_second
        } else {
            0.0
        };
        WriteBudget {
            per_second,
            tokens: per_second.max(1.0),
            refilled: Instant::now(),
        }
    }

    /// Writes the budget allows now.
    pub(super) fn available(&mut self) -> usize {
        if self.per_second == 0.0 {
            return usize::MAX;
        }
        let now = Instant::now();
        let earned = now.duration_since(self.refilled).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + earned).min(self.per_second.max(1.0));
        self.refilled = now;
        self.tokens.floor() as usize
    }

    pub(super) fn spend(&mut self, writes: usize) {
        if self.per_second != 0.0 {
            self.tokens = (self.tokens - writes as f64).max(0.0);
        }
    }
}
