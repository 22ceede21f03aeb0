//! Room held at creation for pods the pod cache has not shown in time: the API server is asked
//! whether each pod exists (a consistent read), and only its "no" gives the room back. A cache
//! behind by more than `HOLD_FOR` under a burst of creations thus never lets the quota be given
//! twice (see `at_creation.rs`).

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use tracing::{Instrument, debug, info_span, warn};

use super::Controller;
use crate::api::AT_CREATION_ANNOTATION;
use crate::queue::at_creation::{HoldCheck, OverdueHold};

impl Controller {
    /// Starts the checks of the holds that are overdue (none under way twice).
    pub(super) fn check_overdue_holds(&self) {
        let Some(at_creation) = self.at_creation.clone() else {
            return;
        };
        let overdue = at_creation.overdue_holds();
        if overdue.is_empty() {
            return;
        }
        let client = self.ungater.client.clone();
        let timeout = self.settings.api_timeout;
        let span = info_span!("hold_checks", holds = overdue.len());
        tokio::spawn(
            async move {
                match tokio::time::timeout(timeout, check(&client, &overdue)).await {
                    Ok(answers) => {
                        for (hold, answer) in overdue.iter().zip(answers) {
                            debug!(token = %hold.token, queue = %hold.queue, ?answer, "hold checked");
                            at_creation.hold_checked(&hold.token, answer);
                        }
                    }
                    Err(_) => {
                        warn!(?timeout, "checking held room timed out; checked again soon");
                        for hold in &overdue {
                            at_creation.hold_checked(&hold.token, HoldCheck::Unknown);
                        }
                    }
                }
            }
            .instrument(span),
        );
    }
}

/// Per hold, whether a pod with its token exists: a named pod is read alone; pods named by the API
/// server (generateName) are looked for among their namespace's pods, one list per namespace.
async fn check(client: &Client, holds: &[OverdueHold]) -> Vec<HoldCheck> {
    let mut listed: BTreeMap<&str, Option<HashSet<String>>> = BTreeMap::new();
    for hold in holds.iter().filter(|h| h.pod.name.is_empty()) {
        listed.entry(hold.pod.namespace.as_str()).or_default();
    }
    for (namespace, tokens) in listed.iter_mut() {
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        *tokens = match api.list_metadata(&ListParams::default()).await {
            Ok(list) => Some(
                list.items
                    .iter()
                    .filter_map(|p| p.annotations().get(AT_CREATION_ANNOTATION).cloned())
                    .collect(),
            ),
            Err(e) => {
                warn!(%namespace, error = %e, "listing pods to check held room; checked again soon");
                None
            }
        };
    }
    let mut answers = Vec::with_capacity(holds.len());
    for hold in holds {
        let answer = if hold.pod.name.is_empty() {
            match listed.get(hold.pod.namespace.as_str()) {
                Some(Some(tokens)) if tokens.contains(&hold.token) => HoldCheck::Exists,
                Some(Some(_)) => HoldCheck::Gone,
                _ => HoldCheck::Unknown,
            }
        } else {
            let api: Api<Pod> = Api::namespaced(client.clone(), &hold.pod.namespace);
            match api.get_metadata_opt(&hold.pod.name).await {
                Ok(Some(pod)) => carries(&pod.annotations().get(AT_CREATION_ANNOTATION), hold),
                Ok(None) => HoldCheck::Gone,
                Err(e) => {
                    warn!(pod = %hold.pod.name, error = %e, "reading a pod to check held room; checked again soon");
                    HoldCheck::Unknown
                }
            }
        };
        answers.push(answer);
    }
    answers
}

/// A pod of the hold's name exists: it is the hold's pod only if it carries the hold's token (one
/// created again under the same name is another pod: the hold's is gone).
fn carries(token: &Option<&String>, hold: &OverdueHold) -> HoldCheck {
    if token.is_some_and(|t| *t == hold.token) {
        HoldCheck::Exists
    } else {
        HoldCheck::Gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::at_creation::PodBinding;

    #[test]
    fn a_pod_of_the_same_name_without_the_token_is_not_the_holds() {
        let hold = OverdueHold {
            token: "abc1".into(),
            pod: PodBinding {
                namespace: "ns".into(),
                name: "p".into(),
                generate_name: String::new(),
            },
            queue: "q".into(),
        };
        let same = "abc1".to_string();
        let other = "zzz9".to_string();
        assert_eq!(carries(&Some(&same), &hold), HoldCheck::Exists);
        assert_eq!(carries(&Some(&other), &hold), HoldCheck::Gone);
        assert_eq!(carries(&None, &hold), HoldCheck::Gone);
    }
}
