//! Arbitrary vfio-user message streams sent over a real socket to the server (rust-vmm's
//! vfio_user::Server with rnic-emu's Backend), as `rnic-emu serve` runs it.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rnic_emu_testkit::fuzzing::vfio_stream(data));
