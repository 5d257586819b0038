//! Config-space unit tests: BAR sizing probe, read-only and W1C bits, capability chain.
use super::caps::{self, CAP_ID_MSIX, CAP_ID_PCIE, CAP_ID_PM};
use super::config::*;

fn sample() -> ConfigSpace {
    let id = Identity { vendor_id: 0x1234, device_id: 0x52e1, subsystem_vendor_id: 0x1234, subsystem_id: 1, class_code: 0x020000, revision: 1 };
    let bars =
        [BarDef { index: 0, size: 0x1_0000, is_64bit: false, prefetchable: false }, BarDef { index: 1, size: 1 << 34, is_64bit: true, prefetchable: true }];
    let caps = [caps::power_management(), caps::msix(8, 0, 0x8000, 0xc000), caps::pcie_endpoint()];
    ConfigSpace::new(id, &bars, &caps).unwrap()
}

fn r32(cs: &ConfigSpace, off: usize) -> u32 {
    let mut b = [0u8; 4];
    cs.read(off, &mut b).unwrap();
    u32::from_le_bytes(b)
}

fn w32(cs: &mut ConfigSpace, off: usize, v: u32) -> WriteEffects {
    cs.write(off, &v.to_le_bytes()).unwrap()
}

#[test]
fn identity_fields() {
    let cs = sample();
    assert_eq!(r32(&cs, 0), 0x52e1_1234);
    assert_eq!(r32(&cs, 0x08), 0x0200_0001);
    assert_eq!(r32(&cs, SUBSYSTEM_VENDOR_ID), 0x0001_1234);
    assert_eq!(cs.get16(STATUS) & STATUS_CAP_LIST, STATUS_CAP_LIST);
}

#[test]
fn identity_is_read_only() {
    let mut cs = sample();
    w32(&mut cs, 0, 0xffff_ffff);
    w32(&mut cs, 0x08, 0xffff_ffff);
    w32(&mut cs, SUBSYSTEM_VENDOR_ID, 0);
    assert_eq!(r32(&cs, 0), 0x52e1_1234);
    assert_eq!(r32(&cs, 0x08), 0x0200_0001);
    assert_eq!(r32(&cs, SUBSYSTEM_VENDOR_ID), 0x0001_1234);
}

#[test]
fn command_register_writable_bits_only() {
    let mut cs = sample();
    let fx = cs.write(COMMAND, &0xffffu16.to_le_bytes()).unwrap();
    assert!(fx.decoding_changed);
    assert_eq!(cs.get16(COMMAND), 0x0547);
    assert!(cs.memory_enabled() && cs.bus_master_enabled());
}

#[test]
fn status_error_bits_are_write_one_to_clear_and_cap_list_sticks() {
    let mut cs = sample();
    cs.write(STATUS, &0xffffu16.to_le_bytes()).unwrap();
    assert_eq!(cs.get16(STATUS), STATUS_CAP_LIST);
}

#[test]
fn bar_sizing_probe_32bit() {
    let mut cs = sample();
    w32(&mut cs, BAR0, 0xffff_ffff);
    assert_eq!(r32(&cs, BAR0), 0xffff_0000, "64 KiB, 32-bit, non-prefetchable");
    w32(&mut cs, BAR0, 0xfebf_0000);
    assert_eq!(cs.bar_address(0), Some(0xfebf_0000));
}

#[test]
fn bar_sizing_probe_64bit_prefetchable() {
    let mut cs = sample();
    let low = BAR0 + 4;
    assert_eq!(r32(&cs, low) & 0xf, 0b1100, "64-bit prefetchable type bits");
    w32(&mut cs, low, 0xffff_ffff);
    w32(&mut cs, low + 4, 0xffff_ffff);
    assert_eq!(r32(&cs, low), 0x0000_000c);
    assert_eq!(r32(&cs, low + 4), 0xffff_fffc, "16 GiB: bits 34 and up writable");
    let size = !(u64::from(r32(&cs, low + 4)) << 32 | u64::from(r32(&cs, low) & !0xf)) + 1;
    assert_eq!(size, 1 << 34);
    w32(&mut cs, low, 0);
    w32(&mut cs, low + 4, 0x4);
    assert_eq!(cs.bar_address(1), Some(0x4_0000_0000));
    assert_eq!(cs.bar_window(1), None, "memory decoding still off");
    cs.write(COMMAND, &COMMAND_MEMORY.to_le_bytes()).unwrap();
    assert_eq!(cs.bar_window(1), Some((0x4_0000_0000, 1 << 34)));
}

#[test]
fn unused_bars_and_rom_read_zero_and_stay_zero() {
    let mut cs = sample();
    for off in [BAR0 + 12, BAR0 + 16, BAR0 + 20, 0x30] {
        w32(&mut cs, off, 0xffff_ffff);
        assert_eq!(r32(&cs, off), 0, "offset {off:#x}");
    }
}

#[test]
fn capability_chain_walks_to_the_end() {
    let cs = sample();
    let mut ptr = usize::from(cs.get16(CAPABILITIES_POINTER) as u8);
    let mut seen = Vec::new();
    while ptr != 0 {
        assert_eq!(ptr % 4, 0);
        assert!((0x40..0x100).contains(&ptr));
        let mut hdr = [0u8; 2];
        cs.read(ptr, &mut hdr).unwrap();
        seen.push(hdr[0]);
        ptr = usize::from(hdr[1]);
        assert!(seen.len() < 16, "loop in capability list");
    }
    assert_eq!(seen, vec![CAP_ID_PM, CAP_ID_MSIX, CAP_ID_PCIE]);
    assert_eq!(r32(&cs, 0x100), 0, "empty extended capability list");
}

fn find_cap(cs: &ConfigSpace, id: u8) -> usize {
    let mut ptr = usize::from(cs.get16(CAPABILITIES_POINTER) as u8);
    while ptr != 0 {
        if cs.get16(ptr) as u8 == id {
            return ptr;
        }
        ptr = usize::from((cs.get16(ptr) >> 8) as u8);
    }
    panic!("capability {id:#x} missing");
}

#[test]
fn msix_capability_fields() {
    let mut cs = sample();
    let off = find_cap(&cs, CAP_ID_MSIX);
    assert_eq!(cs.get16(off + 2) & 0x7ff, 7, "table size is N-1");
    assert_eq!(r32(&cs, off + 4), 0x8000);
    assert_eq!(r32(&cs, off + 8), 0xc000);
    cs.write(off + 2, &0xffffu16.to_le_bytes()).unwrap();
    assert_eq!(cs.get16(off + 2), 0xc007, "only enable and function mask are writable");
    w32(&mut cs, off + 4, 0);
    assert_eq!(r32(&cs, off + 4), 0x8000);
}

#[test]
fn pcie_capability_endpoint_and_flr() {
    let mut cs = sample();
    let off = find_cap(&cs, CAP_ID_PCIE);
    assert_eq!(cs.get16(off + 2), 0x0002, "v2 endpoint");
    assert_ne!(r32(&cs, off + 4) & (1 << 28), 0, "FLR capable");
    let fx = cs.write(off + caps::PCIE_DEVCTL, &0x8000u16.to_le_bytes()).unwrap();
    assert!(fx.flr);
    assert_eq!(cs.get16(off + caps::PCIE_DEVCTL) & 0x8000, 0, "FLR bit reads 0");
}

#[test]
fn out_of_range_accesses_are_refused() {
    let mut cs = sample();
    let mut b = [0u8; 4];
    assert!(cs.read(4094, &mut b).is_none());
    assert!(cs.read(usize::MAX - 1, &mut b).is_none());
    assert!(cs.write(4096, &b).is_none());
    assert!(cs.write(usize::MAX, &b).is_none());
    let mut whole = vec![0u8; CONFIG_SPACE_SIZE];
    assert!(cs.read(0, &mut whole).is_some());
}

#[test]
fn reset_restores_power_on_values() {
    let mut cs = sample();
    w32(&mut cs, BAR0, 0xfebf_0000);
    cs.write(COMMAND, &0x6u16.to_le_bytes()).unwrap();
    cs.reset();
    assert_eq!(cs.bar_address(0), Some(0));
    assert_eq!(cs.get16(COMMAND), 0);
}

#[test]
fn layout_errors() {
    let id = Identity { vendor_id: 1, device_id: 2, subsystem_vendor_id: 0, subsystem_id: 0, class_code: 0, revision: 0 };
    let bad_size = [BarDef { index: 0, size: 3000, is_64bit: false, prefetchable: false }];
    assert_eq!(ConfigSpace::new(id, &bad_size, &[]).err(), Some(LayoutError::BadSize(0)));
    let overlap = [BarDef { index: 0, size: 4096, is_64bit: true, prefetchable: false }, BarDef { index: 1, size: 4096, is_64bit: false, prefetchable: false }];
    assert_eq!(ConfigSpace::new(id, &overlap, &[]).err(), Some(LayoutError::BadIndex(1)));
    let last64 = [BarDef { index: 5, size: 4096, is_64bit: true, prefetchable: false }];
    assert_eq!(ConfigSpace::new(id, &last64, &[]).err(), Some(LayoutError::BadIndex(5)));
}
