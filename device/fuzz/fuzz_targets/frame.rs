//! Hostile Ethernet frames from the segment: the frame decoder (classify, decode, the
//! re-encoding round trip) and the port's receive path into an engine and the netdev's
//! receive ring (`rnic_emu_testkit::fuzzing::frame`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rnic_emu_testkit::fuzzing::frame(data));
