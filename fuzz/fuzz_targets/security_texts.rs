#![no_main]
//! Fuzz target: see `tributary_core::fuzzing::security_texts` for the properties checked.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tributary_core::fuzzing::security_texts(data));
