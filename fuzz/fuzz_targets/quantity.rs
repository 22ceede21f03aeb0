//! Resource quantities as users write them: sluice's parser must never panic, overflow or take
//! time that grows with the exponent (docs/src/development/reliability.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        sluice_fuzz::timed(data.len(), || {
            let _ = sluice::resources::parse_quantity(text);
        });
    }
});
