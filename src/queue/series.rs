//! Gauge series kept per key (a queue, a cohort) and per resource, the one way the queue and
//! cohort gauges set and forget them: amounts in base units (sluice counts in milli-units), a
//! timestamp series only while there is a time, and a key's or resource's series removed once
//! it is gone.

use std::collections::BTreeSet;
use std::hash::Hash;
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::resources::ResourceList;

/// A family of gauges in base units (cores, bytes, GPUs, pods).
pub(crate) type FloatFamily<L> = Family<L, Gauge<f64, AtomicU64>>;

/// Milli-units to base units.
pub(crate) fn base(milli: i64) -> f64 {
    milli as f64 / 1000.0
}

/// The resources a key has series for: those its quota names and those it uses.
pub(crate) fn resources_of(quota: &ResourceList, used: &ResourceList) -> BTreeSet<String> {
    quota.0.keys().chain(used.0.keys()).cloned().collect()
}

/// Per resource, each family's series (labelled `labels(resource)`) set to its list's amount.
pub(crate) fn set_per_resource<L: Clone + Hash + Eq>(
    resources: &BTreeSet<String>,
    labels: impl Fn(&str) -> L,
    series: &[(&FloatFamily<L>, &ResourceList)],
) {
    for resource in resources {
        let l = labels(resource);
        for (family, amounts) in series {
            family.get_or_create(&l).set(base(amounts.get(resource)));
        }
    }
}

/// Removes the families' series of the resources `had` names and `has` does not (None: the key is
/// gone, and every one of them with it).
pub(crate) fn remove_resources_gone<L: Clone + Hash + Eq>(
    had: &BTreeSet<String>,
    has: Option<&BTreeSet<String>>,
    labels: impl Fn(&str) -> L,
    families: &[&FloatFamily<L>],
) {
    for resource in had {
        if has.is_some_and(|r| r.contains(resource)) {
            continue;
        }
        let l = labels(resource);
        for family in families {
            family.remove(&l);
        }
    }
}

/// A timestamp series: set to `at_ms` (ms since the epoch) in seconds, or removed without one.
pub(crate) fn set_timestamp<L: Clone + Hash + Eq>(
    family: &FloatFamily<L>,
    labels: &L,
    at_ms: Option<i64>,
) {
    match at_ms {
        Some(at) => {
            family.get_or_create(labels).set(at as f64 / 1000.0);
        }
        None => {
            family.remove(labels);
        }
    }
}
