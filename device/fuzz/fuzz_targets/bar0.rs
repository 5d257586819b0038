//! Hostile BAR0 register and config-space accesses on the RNIC model.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rnic_emu_testkit::fuzzing::bar0(data));
