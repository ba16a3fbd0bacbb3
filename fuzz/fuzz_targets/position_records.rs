#![no_main]
//! Fuzz target: see `tributary_core::fuzzing::position_records` for the properties checked.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tributary_core::fuzzing::position_records(data));
