//! Test-only switches that break a safety rule on purpose (feature `sabotage`), so a
//! test can show that the simulator's checker finds the bug. Never enable in a build
//! you ship.

/// Which rules to break.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sabotage {
    /// Measure validity from when the reply arrived instead of when the request was
    /// sent (breaks DESIGN.md rule 1).
    pub validity_from_reply: bool,
}
