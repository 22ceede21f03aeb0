//! Durations as users write them in specs (a TaskCluster's idleTimeout, a ScavengerJob's duration):
//! never a panic, never a wrapped value.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        sluice_fuzz::timed(data.len(), || {
            if let Ok(d) = sluice::duration::parse_duration(text) {
                assert!(d <= sluice::duration::MAX_DURATION, "{text:?} gave {d:?}");
            }
        });
    }
});
