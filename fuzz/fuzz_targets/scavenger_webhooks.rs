//! An AdmissionReview of a ScavengerJob, or of a pod or Job claiming the scavenger marks, from
//! anyone who can create one. The first byte picks the webhook.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    let path = if which % 2 == 0 {
        "/validate-scavengerjobs"
    } else {
        "/validate-scavenger-workloads"
    };
    sluice_fuzz::timed(body.len(), || sluice_fuzz::post(path, body));
});
