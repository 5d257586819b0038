//! The port's GID table (contract minor 8, docs/fabric.md "Addressing"): the addresses the
//! driver gave the port with CMD_SET_GID, which ib_core keeps equal to the netdev's
//! addresses. An IPv4-mapped GID makes its IPv4 address one of the port's: the fabric port
//! takes RoCE packets to it ([`GidTable::has_ipv4`]), and a QP path may send from it
//! ([`GidTable::ipv4`]). Any other unicast GID is an IPv6 address of the port (minor 9):
//! [`GidTable::has_ipv6`], [`GidTable::ipv6`]. Unspecified, loopback and multicast IPv6
//! GIDs are kept but are no address ([`ipv6_of`]).
//!
//! The fabric port asks [`GidTable::has_ipv4`] for every received IPv4 packet, so the IPv4
//! addresses are atomics (0: none) beside the full GIDs behind a lock, which an IPv6
//! packet takes.

use crate::contract::abi::{GidEntry, CMD_ERR_INVALID, GID_FLAG_VALID, GID_TABLE_LEN};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

const LEN: usize = GID_TABLE_LEN as usize;

/// A GID, its 16 bytes in wire order.
pub type Gid = [u8; 16];

#[derive(Debug, Default)]
pub struct GidTable {
    gids: Mutex<[Option<Gid>; LEN]>,
    /// The IPv4 address of each IPv4-mapped entry, `a << 24 | ...`; 0: none.
    ipv4: [AtomicU32; LEN],
}

/// A GID from the two little-endian halves a descriptor holds it in (GID table entries, QP
/// paths, UD address vectors: bytes 0-7 in wire order in the first, 8-15 in the second).
pub fn of_halves(lo: u64, hi: u64) -> Gid {
    let mut gid = [0u8; 16];
    gid[..8].copy_from_slice(&lo.to_le_bytes());
    gid[8..].copy_from_slice(&hi.to_le_bytes());
    gid
}

/// The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d).
pub fn ipv4_of(gid: &Gid) -> Option<Ipv4Addr> {
    Ipv6Addr::from(*gid).to_ipv4_mapped()
}

/// The IPv6 address of a GID that is one (not IPv4-mapped), if a port may have it: not
/// unspecified, loopback or multicast.
pub fn ipv6_of(gid: &Gid) -> Option<Ipv6Addr> {
    let ip = Ipv6Addr::from(*gid);
    let unusable = ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() || ip.to_ipv4_mapped().is_some();
    (!unusable).then_some(ip)
}

/// The table entry a driver writes for `gid` (None: the entry cleared), as [`parse`] reads it.
pub fn entry(gid: Option<Gid>) -> GidEntry {
    let Some(g) = gid else { return GidEntry::default() };
    let (lo, hi) = g.split_at(8);
    GidEntry {
        gid_lo: u64::from_le_bytes(lo.try_into().unwrap_or_default()),
        gid_hi: u64::from_le_bytes(hi.try_into().unwrap_or_default()),
        flags: GID_FLAG_VALID as u8,
        ..Default::default()
    }
}

/// The address an entry written by the driver gives the port (None: the entry is cleared),
/// or CMD_ERR_INVALID: unknown flags, nonzero reserved fields, or an IPv4-mapped GID whose
/// address no port may have (0.0.0.0/8, multicast, class E, broadcast).
pub fn parse(e: &GidEntry) -> Result<Option<Gid>, u32> {
    if u32::from(e.flags) & !GID_FLAG_VALID != 0 || e.rsvd0 != 0 || e.rsvd1 != 0 || e.rsvd2 != 0 || e.rsvd3 != 0 {
        return Err(CMD_ERR_INVALID);
    }
    if u32::from(e.flags) & GID_FLAG_VALID == 0 {
        return Ok(None);
    }
    let gid = of_halves(e.gid_lo, e.gid_hi);
    if let Some(ip) = ipv4_of(&gid) {
        let o = ip.octets();
        if o[0] == 0 || o[0] >= 224 {
            return Err(CMD_ERR_INVALID);
        }
    }
    Ok(Some(gid))
}

impl GidTable {
    /// Entry `index` (< GID_TABLE_LEN, checked by the caller) becomes `gid`.
    pub fn set(&self, index: usize, gid: Option<Gid>) {
        let Some(slot) = self.ipv4.get(index) else { return };
        let mut gids = self.gids.lock().unwrap_or_else(|p| p.into_inner());
        gids[index] = gid;
        slot.store(gid.as_ref().and_then(ipv4_of).map_or(0, u32::from), Ordering::SeqCst);
    }

    /// The GID of entry `index`.
    pub fn get(&self, index: usize) -> Option<Gid> {
        self.gids.lock().unwrap_or_else(|p| p.into_inner()).get(index).copied().flatten()
    }

    /// The IPv4 address of entry `index`, if it holds an IPv4-mapped GID.
    pub fn ipv4(&self, index: usize) -> Option<Ipv4Addr> {
        let v = self.ipv4.get(index)?.load(Ordering::SeqCst);
        (v != 0).then(|| Ipv4Addr::from(v))
    }

    /// The IPv6 address of entry `index`, if it holds an IPv6 GID a port may have.
    pub fn ipv6(&self, index: usize) -> Option<Ipv6Addr> {
        self.get(index).as_ref().and_then(ipv6_of)
    }

    /// Whether `ip` is the IPv6 address of an entry.
    pub fn has_ipv6(&self, ip: Ipv6Addr) -> bool {
        let gids = self.gids.lock().unwrap_or_else(|p| p.into_inner());
        ipv6_of(&ip.octets()).is_some() && gids.iter().flatten().any(|g| *g == ip.octets())
    }

    /// Whether `ip` is the address of an entry.
    pub fn has_ipv4(&self, ip: Ipv4Addr) -> bool {
        let v = u32::from(ip);
        v != 0 && self.ipv4.iter().any(|a| a.load(Ordering::Relaxed) == v)
    }

    /// Device reset: every entry gone.
    pub fn clear(&self) {
        for i in 0..LEN {
            self.set(i, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_flags(gid: Gid, flags: u8) -> GidEntry {
        GidEntry { flags, ..super::entry(Some(gid)) }
    }

    fn mapped(a: [u8; 4]) -> Gid {
        Ipv4Addr::from(a).to_ipv6_mapped().octets()
    }

    #[test]
    fn ipv4_entries_are_the_ports_addresses_and_others_are_kept() {
        let t = GidTable::default();
        let v4 = parse(&with_flags(mapped([10, 0, 0, 21]), 1)).unwrap();
        let mut v6 = [0u8; 16];
        v6[0] = 0xfe;
        v6[1] = 0x80;
        v6[15] = 7;
        let v6 = parse(&with_flags(v6, 1)).unwrap();
        t.set(3, v4);
        t.set(4, v6);
        assert_eq!(t.ipv4(3), Some(Ipv4Addr::new(10, 0, 0, 21)));
        assert!(t.has_ipv4(Ipv4Addr::new(10, 0, 0, 21)) && !t.has_ipv4(Ipv4Addr::new(10, 0, 0, 22)));
        assert_eq!((t.ipv4(4), t.get(4), t.get(5)), (None, v6, None), "an IPv6 GID is kept, no IPv4 address");
        let fe80_7: Ipv6Addr = "fe80::7".parse().unwrap();
        assert_eq!((t.ipv6(4), t.ipv6(3), t.ipv6(5)), (Some(fe80_7), None, None), "an IPv6 address, and only of IPv6 GIDs");
        assert!(t.has_ipv6(fe80_7) && !t.has_ipv6("fe80::8".parse().unwrap()));
        assert!(!t.has_ipv6(Ipv4Addr::new(10, 0, 0, 21).to_ipv6_mapped()), "an IPv4 entry is no IPv6 address");
        t.set(3, parse(&with_flags(mapped([10, 0, 0, 21]), 0)).unwrap());
        assert!(!t.has_ipv4(Ipv4Addr::new(10, 0, 0, 21)), "flags 0 removes it");
        t.set(LEN, v4);
        t.clear();
        assert!((0..LEN).all(|i| t.get(i).is_none()));
        assert_eq!(parse(&entry(v4)), Ok(v4), "entry and parse are inverses");
        assert_eq!(parse(&entry(None)), Ok(None));
    }

    #[test]
    fn unspecified_loopback_and_multicast_ipv6_gids_are_no_address() {
        let t = GidTable::default();
        for (i, bad) in ["::", "::1", "ff02::1"].into_iter().enumerate() {
            let ip: Ipv6Addr = bad.parse().unwrap();
            t.set(i, Some(ip.octets()));
            assert_eq!((t.ipv6(i), t.has_ipv6(ip)), (None, false), "{bad}");
            assert_eq!(t.get(i), Some(ip.octets()), "{bad} is kept");
        }
    }

    #[test]
    fn entries_no_port_may_have_are_refused() {
        for bad in [[0, 1, 2, 3], [224, 0, 0, 1], [255, 255, 255, 255], [240, 0, 0, 1]] {
            assert_eq!(parse(&with_flags(mapped(bad), 1)), Err(CMD_ERR_INVALID), "{bad:?}");
        }
        assert_eq!(parse(&with_flags(mapped([10, 0, 0, 1]), 3)), Err(CMD_ERR_INVALID), "unknown flag");
        assert_eq!(parse(&GidEntry { flags: 1, rsvd2: 1, ..with_flags(mapped([10, 0, 0, 1]), 1) }), Err(CMD_ERR_INVALID), "reserved field");
    }
}
