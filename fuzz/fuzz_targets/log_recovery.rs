#![no_main]
//! Fuzz target: see `tributary_core::fuzzing::log_recovery` for the properties checked.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tributary_core::fuzzing::log_recovery(data));
