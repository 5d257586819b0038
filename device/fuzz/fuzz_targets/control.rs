//! Arbitrary bytes on a node's control socket, cut into bounded request lines and
//! answered by the server's dispatcher, as `rnic-emu serve` answers them.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rnic_emu_testkit::fuzzing::control(data));
