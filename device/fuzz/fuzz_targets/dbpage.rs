//! The verbs operations with the doorbell page (BAR2) on: WQEs posted through the page as
//! a driver does, raw page stores, the event loop's sleep publishing event indices.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rnic_emu_testkit::fuzzing::dbpage(data));
