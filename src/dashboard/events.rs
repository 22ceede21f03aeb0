//! The Kubernetes Events of a workload, for its page, never from a watch of every event of the
//! cluster: the DynamicWorkloads' own (one watch with the field selector
//! `involvedObject.kind=DynamicWorkload`, the last [`EVENTS_PER_WORKLOAD`] of each kept), and its
//! application's (sluice tells the application object, or the pod of a bare pod, that it waits, is
//! admitted, preempts): listed when its page asks, with a field selector on that one object, and
//! cached a few seconds. An event counts only when it lives in its object's namespace (anyone who
//! may create events in namespace B may write one that names an object of namespace A).

use std::collections::{HashMap, VecDeque};

use k8s_openapi::api::core::v1::Event;
use serde::Serialize;

use crate::dashboard::model::{Scope, redact};

/// Events kept per workload (the newest).
pub const EVENTS_PER_WORKLOAD: usize = 20;

/// The field selector of the watch.
pub const FIELD_SELECTOR: &str = "involvedObject.kind=DynamicWorkload";

/// One event as the workload page shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRow {
    /// When it last happened (RFC 3339).
    pub at: String,
    /// `Normal` or `Warning`.
    pub type_: String,
    pub reason: String,
    pub message: String,
    /// How often it happened (1 for a single one).
    pub count: i32,
    /// Who reported it (`sluice`).
    pub from: String,
    /// The object it is about, e.g. `DynamicWorkload w` or `Job w`.
    pub object: String,
    #[serde(skip)]
    uid: String,
}

type Key = (String, String);

/// The kept events, per workload.
#[derive(Debug, Default)]
pub struct Events {
    by_workload: HashMap<Key, VecDeque<EventRow>>,
    /// Filled during a relist, swapped in at its end.
    relist: Option<HashMap<Key, VecDeque<EventRow>>>,
}

/// The workload `event` is about and the row shown, if it is a DynamicWorkload's event of the
/// workload's own namespace.
fn row_of(event: &Event) -> Option<(Key, EventRow)> {
    let about = &event.involved_object;
    let sluice_object = about
        .api_version
        .as_deref()
        .is_some_and(|v| v.starts_with(&format!("{}/", crate::api::GROUP)));
    if about.kind.as_deref() != Some("DynamicWorkload") || !sluice_object {
        return None;
    }
    let namespace = about.namespace.clone()?;
    Some(((namespace, about.name.clone()?), own_row(event)?))
}

/// The row of `event` if it lives in the namespace of the object it names.
pub fn own_row(event: &Event) -> Option<EventRow> {
    let about = &event.involved_object;
    let namespace = about.namespace.as_deref()?;
    if event.metadata.namespace.as_deref() != Some(namespace) {
        return None;
    }
    let series = event.series.as_ref();
    let at = series
        .and_then(|s| s.last_observed_time.as_ref())
        .or(event.event_time.as_ref())
        .map(|t| t.0.to_string())
        .or_else(|| event.last_timestamp.as_ref().map(|t| t.0.to_string()))
        .or_else(|| event.first_timestamp.as_ref().map(|t| t.0.to_string()))
        .or_else(|| {
            let created = event.metadata.creation_timestamp.as_ref();
            created.map(|t| t.0.to_string())
        })
        .unwrap_or_default();
    let count = series
        .and_then(|s| s.count)
        .or(event.count)
        .unwrap_or(1)
        .max(1);
    let from = event
        .reporting_component
        .clone()
        .filter(|c| !c.is_empty())
        .or_else(|| event.source.as_ref().and_then(|s| s.component.clone()))
        .unwrap_or_default();
    Some(EventRow {
        at,
        type_: event.type_.clone().unwrap_or_default(),
        reason: event.reason.clone().unwrap_or_default(),
        message: event.message.clone().unwrap_or_default(),
        count,
        from,
        object: format!(
            "{} {}",
            about.kind.as_deref().unwrap_or_default(),
            about.name.as_deref().unwrap_or_default()
        ),
        uid: event.metadata.uid.clone().unwrap_or_default(),
    })
}

/// The field selector of the events of one object, if its kind and name are plain names (they
/// come from a workload's spec: nothing that could widen the selector).
pub fn selector_of(kind: &str, name: &str) -> Option<String> {
    let plain = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    };
    (plain(kind) && plain(name))
        .then(|| format!("involvedObject.kind={kind},involvedObject.name={name}"))
}

/// `rows` redacted for `scope`, oldest first, the newest [`EVENTS_PER_WORKLOAD`] of them.
pub fn newest(mut rows: Vec<EventRow>, scope: &Scope) -> Vec<EventRow> {
    rows.sort_by(|a, b| a.at.cmp(&b.at));
    let skip = rows.len().saturating_sub(EVENTS_PER_WORKLOAD);
    rows.into_iter()
        .skip(skip)
        .map(|r| EventRow {
            message: redact(&r.message, scope),
            ..r
        })
        .collect()
}

fn keep(map: &mut HashMap<Key, VecDeque<EventRow>>, key: Key, row: EventRow) {
    let rows = map.entry(key).or_default();
    // An event updated (its count, its last time) replaces itself.
    rows.retain(|r| r.uid.is_empty() || r.uid != row.uid);
    rows.push_back(row);
    rows.make_contiguous().sort_by(|a, b| a.at.cmp(&b.at));
    while rows.len() > EVENTS_PER_WORKLOAD {
        rows.pop_front();
    }
}

impl Events {
    pub fn apply(&mut self, event: &kube::runtime::watcher::Event<Event>) {
        use kube::runtime::watcher::Event as E;
        match event {
            E::Init => self.relist = Some(HashMap::new()),
            E::InitApply(e) => {
                if let (Some(relist), Some((key, row))) = (self.relist.as_mut(), row_of(e)) {
                    keep(relist, key, row);
                }
            }
            E::InitDone => {
                if let Some(fresh) = self.relist.take() {
                    self.by_workload = fresh;
                }
            }
            E::Apply(e) => {
                if let Some((key, row)) = row_of(e) {
                    keep(&mut self.by_workload, key, row);
                }
            }
            E::Delete(e) => {
                if let Some((key, row)) = row_of(e)
                    && let Some(rows) = self.by_workload.get_mut(&key)
                {
                    rows.retain(|r| r.uid != row.uid);
                    if rows.is_empty() {
                        self.by_workload.remove(&key);
                    }
                }
            }
        }
    }

    /// Forgets the events of workloads that no longer exist (`exists` says which do).
    pub fn prune(&mut self, exists: impl Fn(&str, &str) -> bool) {
        self.by_workload.retain(|(ns, name), _| exists(ns, name));
    }

    /// The events kept of one workload's DynamicWorkload (not redacted).
    pub fn of(&self, namespace: &str, name: &str) -> Vec<EventRow> {
        let key = (namespace.to_string(), name.to_string());
        let rows = self.by_workload.get(&key).into_iter().flatten();
        rows.cloned().collect()
    }

    /// How many workloads have events kept.
    pub fn workloads(&self) -> usize {
        self.by_workload.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event as E;

    fn event(ns: &str, about_ns: &str, name: &str, uid: &str, at: &str, note: &str) -> Event {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": ns, "uid": uid},
            "involvedObject": {"apiVersion": "sluice.dev/v1alpha1", "kind": "DynamicWorkload",
                "namespace": about_ns, "name": name},
            "reason": "Preempted", "message": note, "type": "Normal",
            "eventTime": at, "reportingComponent": "sluice",
        }))
        .expect("event")
    }

    #[test]
    fn events_are_kept_per_workload_bounded_and_only_from_its_namespace() {
        let mut events = Events::default();
        events.apply(&E::Init);
        events.apply(&E::InitApply(event(
            "a",
            "a",
            "w",
            "u0",
            "2026-11-27T10:00:00.000000Z",
            "evicted to make room for b/x",
        )));
        events.apply(&E::InitDone);
        // Written in namespace b about a's workload: not a's.
        events.apply(&E::Apply(event(
            "b",
            "a",
            "w",
            "forged",
            "2026-11-27T10:00:01.000000Z",
            "forged",
        )));
        let only_a = Scope::Namespaces(["a".to_string()].into());
        let rows = newest(events.of("a", "w"), &only_a);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(
            rows[0].message,
            "evicted to make room for <a workload of another namespace>"
        );
        assert_eq!(rows[0].from, "sluice");
        for i in 0..50 {
            let at = format!("2026-11-27T10:01:{i:02}.000000Z");
            events.apply(&E::Apply(event("a", "a", "w", &format!("u{i}"), &at, "n")));
        }
        let rows = events.of("a", "w");
        assert_eq!(rows.len(), EVENTS_PER_WORKLOAD);
        assert!(rows.windows(2).all(|p| p[0].at <= p[1].at));
        events.prune(|_, _| false);
        assert_eq!(events.workloads(), 0);
    }

    #[test]
    fn an_application_selector_takes_plain_names_only() {
        assert_eq!(
            selector_of("Job", "etl-1").as_deref(),
            Some("involvedObject.kind=Job,involvedObject.name=etl-1")
        );
        assert_eq!(selector_of("Job", "x,involvedObject.namespace=b"), None);
        assert_eq!(selector_of("Job", ""), None);
        let forged = event("b", "a", "w", "f", "2026-11-27T10:00:00.000000Z", "n");
        assert_eq!(own_row(&forged), None);
    }
}
