//! Tests of the transmit offloads (`eth_offload.rs`) on frames built here: checksums
//! against a separate word-by-word computation, segments' lengths, sequence numbers, IDs,
//! flags and checksums, and the refusals, at and just past each limit.

use super::eth_offload::{fold, insert_csum, rx_csum_ok, sum16, Tso, TSO_MAX_FRAME};
use crate::regs::rnic::eth::TSO_MAX_PAYLOAD;

/// The Internet checksum the plain way: 16-bit words added with the carry folded back at
/// each step, an odd last byte padded with a zero; the sum, not its complement.
fn plain_sum(parts: &[&[u8]]) -> u16 {
    let bytes: Vec<u8> = parts.concat();
    let mut s: u32 = 0;
    for i in (0..bytes.len()).step_by(2) {
        let hi = u32::from(bytes[i]);
        let lo = if i + 1 < bytes.len() { u32::from(bytes[i + 1]) } else { 0 };
        s += hi << 8 | lo;
        if s > 0xffff {
            s = (s & 0xffff) + 1;
        }
    }
    s as u16
}

fn bytes(len: usize, seed: u32) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed).rotate_right(13) as u8).collect()
}

const MAC: [u8; 12] = [2, 0xe1, 10, 0, 0, 12, 2, 0xe1, 10, 0, 0, 11];
/// TCP flags on the big frame: CWR | PSH | ACK | FIN.
const FLAGS: u8 = 0x80 | 0x08 | 0x10 | 0x01;
const SEQ: u32 = 0xffff_f000;

/// An IPv4 (or IPv6) TCP frame with 12 bytes of TCP options and `payload` bytes, the TCP
/// checksum field holding junk (TSO recomputes it).
fn tcp_frame(v6: bool, payload: usize) -> Vec<u8> {
    let mut f = MAC.to_vec();
    if v6 {
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 0, 6, 64]);
        f.extend_from_slice(&bytes(32, 1));
    } else {
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 0, 0xff, 0xfe, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 12, 10, 0, 0, 11]);
    }
    let mut tcp = vec![0x13, 0x89, 0xc3, 0x50];
    tcp.extend_from_slice(&SEQ.to_be_bytes());
    tcp.extend_from_slice(&[0, 0, 0, 1, 0x80, FLAGS, 0x01, 0xf5, 0xde, 0xad, 0, 0]);
    tcp.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
    f.extend_from_slice(&tcp);
    f.extend_from_slice(&bytes(payload, 7));
    f
}

fn be16(f: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([f[at], f[at + 1]])
}

/// Checks the segments of `big` cut with `mss`: count, lengths, payload, fields, checksums.
fn check_segments(big: &[u8], v6: bool, mss: usize) {
    let l4 = if v6 { 54 } else { 34 };
    let hdr = l4 + 32;
    let t = Tso::parse(big, l4, 16, mss, 9014).expect("a good TSO frame");
    assert_eq!(t, Tso { v6, l4, hdr_len: hdr, mss });
    let mut segs = Vec::new();
    t.segment(big, &mut Vec::new(), |s| segs.push(s.to_vec()));
    let payload = big.len() - hdr;
    assert_eq!(segs.len(), payload.div_ceil(mss));
    assert_eq!(t.segments(big), segs.len());
    let mut joined = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        let want = if last { payload - i * mss } else { mss };
        assert_eq!(s.len(), hdr + want, "segment {i}");
        assert_eq!(&s[..14], &big[..14]);
        joined.extend_from_slice(&s[hdr..]);
        let tcp_len = (s.len() - l4) as u32;
        let pseudo: Vec<u8> = if v6 {
            assert_eq!(be16(s, 18), tcp_len as u16, "IPv6 payload length");
            [&s[22..54], &tcp_len.to_be_bytes()[..], &[0, 0, 0, 6]].concat()
        } else {
            assert_eq!(be16(s, 16), (s.len() - 14) as u16, "IPv4 total length");
            assert_eq!(be16(s, 18), 0xfffeu16.wrapping_add(i as u16), "IPv4 ID");
            assert_eq!(plain_sum(&[&s[14..34]]), 0xffff, "IPv4 header checksum");
            assert_eq!(&s[20..24], &big[20..24], "fragment field, TTL, protocol");
            [&s[26..34], &[0, 6], &(tcp_len as u16).to_be_bytes()[..]].concat()
        };
        assert_eq!(plain_sum(&[&pseudo, &s[l4..]]), 0xffff, "TCP checksum of segment {i}");
        let seq = u32::from_be_bytes(s[l4 + 4..l4 + 8].try_into().unwrap());
        assert_eq!(seq, SEQ.wrapping_add((i * mss) as u32), "sequence number of segment {i}");
        let mut flags = FLAGS;
        if !last {
            flags &= !0x09;
        }
        if i > 0 {
            flags &= !0x80;
        }
        assert_eq!(s[l4 + 13], flags, "TCP flags of segment {i}");
        assert_eq!(&s[l4 + 20..hdr], &big[l4 + 20..hdr], "TCP options copied");
        assert!(rx_csum_ok(s), "a receiver's check passes segment {i}");
    }
    assert_eq!(joined, &big[hdr..], "the payload, in order, once");
}

#[test]
fn word_sum_equals_the_plain_sum_at_every_length_and_alignment() {
    for len in 0..=70 {
        for seed in [0, 7, 0xdead_beef] {
            let data = bytes(len, seed);
            for start in 0..len.min(4) {
                let part = &data[start..];
                // The same value in 16 bits: the plain sum's 0 is also the folded sum of
                // nothing; every other sum agrees exactly.
                assert_eq!(fold(sum16(0, part)), plain_sum(&[part]), "len {len} seed {seed} start {start}");
            }
        }
        let ones = vec![0xff; len];
        assert_eq!(fold(sum16(0, &ones)), plain_sum(&[&ones]), "all ones, len {len}");
    }
    // A running sum carried over a call, as the pseudo-header and the segment are summed.
    let data = bytes(9000, 3);
    assert_eq!(fold(sum16(sum16(0, &data[..40]), &data[40..])), plain_sum(&[&data]));
}

#[test]
fn tx_csum_matches_a_plain_computation_and_verifies() {
    for (len, start, offset) in [(60usize, 34usize, 16usize), (61, 34, 6), (1514, 14, 10), (15, 13, 0)] {
        let mut f = bytes(len, len as u32);
        let field = u16::from_be_bytes([f[start + offset], f[start + offset + 1]]);
        insert_csum(&mut f, start, offset).unwrap();
        let got = be16(&f, start + offset);
        let mut zeroed = f.clone();
        zeroed[start + offset..start + offset + 2].copy_from_slice(&field.to_be_bytes());
        let want = !plain_sum(&[&zeroed[start..]]);
        assert_eq!(got, if want == 0 { 0xffff } else { want }, "{len} {start} {offset}");
        // The field's old value plays the pseudo-header's sum, as a receiver adds it.
        assert_eq!(plain_sum(&[&field.to_be_bytes(), &f[start..]]), 0xffff, "the frame's checksum verifies");
    }
}

#[test]
fn tx_csum_offsets_outside_the_frame_are_refused() {
    let mut f = bytes(60, 3);
    let before = f.clone();
    for (start, offset) in [(58, 1), (59, 0), (60, 0), (0, 59), (usize::MAX, 2), (2, usize::MAX)] {
        assert!(insert_csum(&mut f, start, offset).is_err(), "{start} {offset}");
    }
    assert_eq!(f, before, "nothing written");
    assert!(insert_csum(&mut f, 58, 0).is_ok(), "the last two bytes");
}

#[test]
fn ipv4_tso_segments_have_headers_lengths_ids_sequence_flags_and_checksums() {
    check_segments(&tcp_frame(false, 10_000), false, 1448);
    check_segments(&tcp_frame(false, 1), false, 1448);
    check_segments(&tcp_frame(false, 8948 * 3), false, 8948);
}

#[test]
fn ipv6_tso_segments_have_payload_lengths_sequence_flags_and_checksums() {
    check_segments(&tcp_frame(true, 4 * 1428), true, 1428);
    check_segments(&tcp_frame(true, 777), true, 100);
}

#[test]
fn tso_at_exactly_the_limits_is_accepted() {
    // 64 KiB of payload, headers + mss exactly the frame limit of a 9000-byte MTU.
    let big = tcp_frame(false, TSO_MAX_PAYLOAD as usize);
    let mss = 9014 - 66;
    check_segments(&big, false, mss);
    assert!(Tso::parse(&big, 34, 16, mss + 1, 9014).is_err(), "one byte over the MTU");
    let over = tcp_frame(false, TSO_MAX_PAYLOAD as usize + 1);
    assert!(Tso::parse(&over, 34, 16, 1448, 9014).is_err(), "one byte over 64 KiB");
    // Largest headers: IPv4 and TCP options of 40 bytes each.
    let mut f = tcp_frame(false, 100);
    f[14] = 0x4f;
    f.splice(34..34, bytes(40, 9));
    f[34 + 40 + 12] = 0xf0;
    f.splice(34 + 40 + 32..34 + 40 + 32, bytes(28, 5));
    assert_eq!(f.len(), 14 + 60 + 60 + 100);
    let t = Tso::parse(&f, 74, 16, 50, 1514).unwrap();
    assert_eq!((t.l4, t.hdr_len, t.segments(&f)), (74, 134, 2));
    assert!(f.len() - 100 + TSO_MAX_PAYLOAD as usize == TSO_MAX_FRAME);
}

#[test]
fn malformed_tso_requests_are_refused() {
    let good = tcp_frame(false, 3000);
    assert!(Tso::parse(&good, 34, 16, 1448, 1514).is_ok());
    let bad = |what: &str, f: &[u8], start: usize, offset: usize, mss: usize| {
        assert!(Tso::parse(f, start, offset, mss, 1514).is_err(), "{what}");
    };
    bad("mss 0", &good, 34, 16, 0);
    bad("mss past the MTU", &good, 34, 16, 1449);
    bad("csum_start not the TCP header", &good, 35, 16, 1448);
    bad("csum_offset not the TCP checksum", &good, 34, 6, 1448);
    bad("headers only", &good[..66], 34, 16, 1448);
    bad("shorter than the headers", &good[..40], 34, 16, 1448);
    let with = |at: usize, v: u8| {
        let mut f = good.clone();
        f[at] = v;
        f
    };
    bad("UDP", &with(23, 17), 34, 16, 1448);
    bad("IPv4 version 5", &with(14, 0x55), 34, 16, 1448);
    bad("IHL 4", &with(14, 0x44), 34, 16, 1448);
    bad("a fragment", &with(20, 0x20), 34, 16, 1448);
    bad("ARP ethertype", &with(13, 0x06), 34, 16, 1448);
    bad("TCP data offset 4", &with(46, 0x40), 34, 16, 1448);
    bad("TCP data offset past the frame", &with(46, 0xf0), 34, 16, 1448);
    let v6 = tcp_frame(true, 3000);
    assert!(Tso::parse(&v6, 54, 16, 1428, 1514).is_ok());
    let mut ext = v6.clone();
    ext[20] = 0; // a hop-by-hop options header
    bad("IPv6 extension header", &ext, 54, 16, 1428);
    let mut ver = v6.clone();
    ver[14] = 0x40;
    bad("IPv6 ethertype, version 4", &ver, 54, 16, 1428);
    bad("too long", &vec![0u8; TSO_MAX_FRAME + 1], 34, 16, 1448);
}

#[test]
fn rx_csum_passes_right_checksums_only() {
    for v6 in [false, true] {
        let t = Tso::parse(&tcp_frame(v6, 3000), if v6 { 54 } else { 34 }, 16, 1000, 1514).unwrap();
        let mut segs = Vec::new();
        t.segment(&tcp_frame(v6, 3000), &mut Vec::new(), |s| segs.push(s.to_vec()));
        let good = segs.remove(0);
        assert!(rx_csum_ok(&good));
        let mut padded = good.clone();
        padded.extend_from_slice(&[0xaa; 7]);
        assert!(rx_csum_ok(&padded), "Ethernet padding past the IP length is not summed");
        for at in [30, 60, 500, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            assert!(!rx_csum_ok(&bad), "v6 {v6}: byte {at} flipped");
        }
        assert!(!rx_csum_ok(&good[..good.len() - 1]), "shorter than the IP length says");
        // UDP with its checksum made right the plain way.
        let mut udp = good.clone();
        let l4 = if v6 { 54 } else { 34 };
        udp[if v6 { 20 } else { 23 }] = 17;
        udp.truncate(l4 + 8 + 101);
        let ulen = (udp.len() - l4) as u16;
        if v6 {
            udp[18..20].copy_from_slice(&ulen.to_be_bytes());
        } else {
            let tot = (udp.len() - 14) as u16;
            udp[16..18].copy_from_slice(&tot.to_be_bytes());
            udp[24..26].copy_from_slice(&[0, 0]);
            let c = !plain_sum(&[&udp[14..34]]);
            udp[24..26].copy_from_slice(&c.to_be_bytes());
        }
        udp[l4 + 4..l4 + 6].copy_from_slice(&ulen.to_be_bytes());
        udp[l4 + 6..l4 + 8].copy_from_slice(&[0, 0]);
        let pseudo: Vec<u8> = if v6 {
            [&udp[22..54], &u32::from(ulen).to_be_bytes()[..], &[0, 0, 0, 17]].concat()
        } else {
            [&udp[26..34], &[0, 17], &ulen.to_be_bytes()[..]].concat()
        };
        let c = !plain_sum(&[&pseudo, &udp[l4..]]);
        let mut no_csum = udp.clone();
        udp[l4 + 6..l4 + 8].copy_from_slice(&c.to_be_bytes());
        assert!(rx_csum_ok(&udp), "v6 {v6}: UDP");
        no_csum[l4 + 6..l4 + 8].copy_from_slice(&[0, 0]);
        assert!(!rx_csum_ok(&no_csum), "UDP without a checksum is not vouched for");
    }
    assert!(!rx_csum_ok(&bytes(100, 1)), "not IP");
    assert!(!rx_csum_ok(&[]));
}
