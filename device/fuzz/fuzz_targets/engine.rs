//! Hostile guest memory (contexts, MTT, WQEs) and doorbells/commands for the verbs engine.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rnic_emu_testkit::fuzzing::engine(data));
