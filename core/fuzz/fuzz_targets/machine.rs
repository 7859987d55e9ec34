//! The machine contract (`fencepost_core_fuzz::Contract`) under arbitrary inputs, decoded
//! by `fencepost_core_fuzz::drive` (every backend; honest in-memory replies mixed with
//! arbitrary ones, transport errors, duplicates, time steps both ways).
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = fencepost_core_fuzz::drive::run(&mut Unstructured::new(data), &mut |_, _, _| {});
});
