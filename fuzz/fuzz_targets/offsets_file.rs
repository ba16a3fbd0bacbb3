#![no_main]
//! Fuzz target: see `tributary_core::fuzzing::offsets_file` for the properties checked.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tributary_core::fuzzing::offsets_file(data));
