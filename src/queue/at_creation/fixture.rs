//! Admission at creation opened on given rooms without a pass: the state the fuzz targets
//! (`fuzz/`, feature `fuzzing`) drive the webhooks with. A real pass would publish the same
//! shape ([`AdmitAtCreation::publish`]); this skips building a snapshot for it.

use super::*;

/// Admission at creation as a pass would leave it: each `(queue, room)` open to every namespace
/// with `room` left per resource (canonical units: millicores, bytes), nothing waiting, no deadline.
pub fn open_with_rooms(rooms: &[(&str, &[(&str, i64)])]) -> AdmitAtCreation {
    let admit = AdmitAtCreation::default();
    {
        let mut state = admit.lock();
        state.active = true;
        for (queue, room) in rooms {
            state.queues.insert(
                queue.to_string(),
                QueueRoom {
                    room: room.iter().map(|(r, v)| (r.to_string(), *v)).collect(),
                    published: room.iter().map(|(r, v)| (r.to_string(), *v)).collect(),
                    waiting: false,
                    last_gated: None,
                    all_namespaces: true,
                    namespaces: HashSet::new(),
                },
            );
        }
    }
    admit
}
