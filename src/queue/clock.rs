//! Time as the queue reads and bounds it, shared by the controller, its writer and admission at
//! creation (kept here so that none of them imports another for it).

use std::time::Duration;

/// The default bound on every API call of the controller (an ungate patch, the read after a
/// failed one, an event, a status write): a call that hangs must neither hold a write slot nor
/// leave a pod's fate unknown forever.
pub const API_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Now, as the API's timestamps are written (whole seconds, UTC).
pub(crate) fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_written_in_whole_seconds_utc() {
        let now = now_rfc3339();
        assert_eq!(now.len(), "2026-01-01T00:00:00Z".len(), "{now}");
        assert!(now.ends_with('Z'), "{now}");
        assert!(now.parse::<jiff::Timestamp>().is_ok(), "{now}");
    }
}
