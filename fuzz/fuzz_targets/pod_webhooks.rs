//! An AdmissionReview body from anyone who can create a pod: decoded, classified by the real
//! integrations, admitted at creation or gated, validated. The first byte picks the webhook.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    let path = if which % 2 == 0 { "/mutate-pods" } else { "/validate-pods" };
    sluice_fuzz::timed(body.len(), || sluice_fuzz::post(path, body));
});
