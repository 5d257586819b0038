//! Typed operation sequences (objects, MRs with chosen MTT entries, WQEs, doorbells, DMA
//! maps, resets, fabric packets reflected back) for the verbs engine, whose tables the
//! harness places.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rnic_emu_testkit::fuzzing::verbs_ops(data));
