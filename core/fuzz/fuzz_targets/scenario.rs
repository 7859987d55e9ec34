//! The scenario-vector reader and the machine on mutated vectors: the corpus starts from
//! `tests/scenarios/**/*.json` (`scripts/fuzz` copies them in), libFuzzer mutates them,
//! and every vector that still reads is replayed under the machine contract
//! (`fencepost_core_fuzz::Contract`); its expectations are not compared (a mutated vector
//! expects nothing in particular).
#![no_main]

use fencepost_core::{Instant, Machine};
use fencepost_core_fuzz::Contract;
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)] // the replay's fields (name, rules, expectations) are not read here
#[path = "../../tests/vectors/mod.rs"]
mod vectors;

fuzz_target!(|data: &[u8]| {
    let Ok(scenario) = serde_json::from_slice::<vectors::Scenario>(data) else {
        return;
    };
    let backend = scenario.backend.clone().unwrap_or_default();
    let replies = vectors::replies_for(&backend);
    let mut contract = Contract::new(Machine::with_seed(backend, scenario.seed), 0);
    for step in scenario.steps.iter().take(500) {
        let now = Instant::from_nanos(vectors::ms_to_ns(step.at_ms));
        let Ok(input) = vectors::to_input(&step.input, now, &scenario.options, replies) else {
            continue;
        };
        contract.feed(input);
    }
});
