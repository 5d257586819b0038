//! Hostile datagrams for the RoCEv2 packet decoder (ICRC, lengths, opcodes, pad).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rnic_emu_testkit::fuzzing::packet(data));
