//! An AdmissionReview of an application (every integration's kind: SparkApplication, RayCluster,
//! TaskCluster, ...) from anyone who can submit one. The first byte picks the webhook.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    let path = if which % 2 == 0 {
        "/mutate-applications"
    } else {
        "/validate-applications"
    };
    sluice_fuzz::timed(body.len(), || sluice_fuzz::post(path, body));
});
