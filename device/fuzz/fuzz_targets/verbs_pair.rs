//! Two verbs engines joined by an in-memory wire with loss, corruption, duplication and
//! reordering: the RC transport both ways.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rnic_emu_testkit::fuzzing::verbs_pair(data));
