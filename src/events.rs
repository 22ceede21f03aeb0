//! Kubernetes Events as sluice's controllers publish them: one recorder per controller, named
//! for it and for the replica (`POD_NAME`); an Event whose action is its reason; a failure to
//! publish is logged and never fails the work the Event tells of.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::debug;

/// The recorder of the controller `controller` (e.g. `sluice-tasks`), in this replica.
pub fn recorder(client: Client, controller: &str) -> Recorder {
    Recorder::new(
        client,
        Reporter {
            controller: controller.into(),
            instance: std::env::var("POD_NAME").ok(),
        },
    )
}

/// Publishes an Event about `object`, its action its reason.
pub async fn publish(
    recorder: &Recorder,
    object: &ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, object).await {
        debug!(%e, "event not recorded");
    }
}
