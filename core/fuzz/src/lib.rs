//! The machine contract, checked after every input by the fuzz targets (`fuzz_targets/`):
//! `fencepost_core::contract` (feature `contract`), shared with the model checker; and the
//! `machine` target's input decoding ([`drive`]), shared with `flat_outputs`.

pub mod drive;

pub use fencepost_core::contract::{check_flat, Contract};
