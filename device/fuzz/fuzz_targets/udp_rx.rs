//! Datagrams from the remote VTEP and from unexpected senders on the fabric port's real
//! UDP receive path (a VXLAN segment of loopback sockets), as `rnic-emu serve` receives them.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rnic_emu_testkit::fuzzing::udp_rx(data));
