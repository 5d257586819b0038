//! Device statistics: 64-bit counters the engine bumps and BAR0 exposes read-only at
//! `STATS_BASE + 8 * index` (and the host reads through the server). Counters start at 0
//! and are cleared by device reset. Their names and indices are part of the contract
//! (rendered into the C header as `RNIC_STAT_*`); [`Stats`] holds their values and
//! nothing else.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $name:ident, $doc:literal; )*) => {
        /// A statistics counter; its discriminant is its index at STATS_BASE.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum Counter { $( #[doc = $doc] $name, )* }
        /// (name, doc) of every counter, by index.
        pub const COUNTERS: &[(&str, &str)] = &[ $( (stringify!($name), $doc) ),* ];
    };
}

counters! {
    SendWqes, "send-queue WQEs executed (any outcome)";
    RecvWqes, "receive WQEs consumed by incoming SEND/WRITE_IMM";
    Cqes, "CQEs written";
    ErrorCqes, "CQEs written with a status other than success (flushes included)";
    BytesWritten, "payload bytes of RDMA WRITE / WRITE_IMM placed at the responder";
    BytesRead, "payload bytes of RDMA READ returned to the requester";
    BytesSent, "payload bytes of SEND / SEND_IMM placed at the responder";
    Doorbells, "SQ and RQ doorbell register (MMIO) writes";
    Interrupts, "completion interrupts raised";
    RnrRetries, "receiver-not-ready retries";
    Commands, "commands executed through RNIC_REG_CMD";
    CommandErrors, "commands that failed";
    DmaErrors, "DMA accesses refused (address not in mapped guest memory)";
    QpErrors, "QPs that entered ERROR";
    DmaHostBytes, "bytes the RNIC read or wrote in host memory (guest RAM)";
    DmaP2pSwitchBytes, "bytes the RNIC read or wrote in a GPU BAR1 through a shared PCIe switch";
    DmaP2pRootComplexBytes, "bytes the RNIC read or wrote in a GPU BAR1 through the root complex";
    ApertureErrors, "DMAs to a GPU BAR1 the driver did not program into a BAR1_APERTURE slot";
    PktsSent, "RoCEv2 packets sent on the fabric";
    PktsReceived, "RoCEv2 packets received and accepted";
    PktsDropped, "received packets dropped: bad ICRC, length, opcode or pad, unknown QP, IP fragment, impossible source, P_Key (minor 10), the other service than the QP's (UC / RC, minor 13)";
    Retransmits, "packets sent again after a timeout or a sequence NAK";
    Timeouts, "retransmission timer expiries";
    AcksSent, "ACK packets sent";
    NaksSent, "NAK packets sent (sequence, RNR, access, invalid request)";
    DbPageUpdates, "producer/consumer indices taken from the doorbell page (no MMIO write)";
    GuestErrors, "register, region, DMA map and interrupt requests refused (bad offset, width, value, index or range)";
    EthTxFrames, "frames the Ethernet port sent from the transmit ring";
    EthTxBytes, "bytes of those frames";
    EthTxErrors, "transmit descriptors refused (frame length, DMA fault, link down)";
    EthRxFrames, "frames placed in the receive ring";
    EthRxBytes, "bytes of those frames";
    EthRxNoBuffer, "frames for the netdev dropped: no receive buffer posted, or one too small";
    EthRxFiltered, "frames dropped by the MAC filter (unicast for another MAC)";
    EthRxErrors, "frames dropped as malformed: runt, oversized (beyond the MTU), bad IP or UDP header, length or checksum, RoCE fragment (RoCE from an impossible source: ROCE_BAD_SOURCE from minor 10)";
    IcrcErrors, "RoCE packets dropped for a bad ICRC";
    OutOfSequence, "RoCE requests that arrived ahead of the expected PSN (sequence NAK or silent drop)";
    DuplicateRequests, "RoCE requests that arrived again (PSN already acknowledged)";
    RnrNaksSent, "RNR NAKs sent (a SEND found no receive WQE)";
    PktsSentIpv6, "of PKTS_SENT, those sent over IPv6 (minor 9)";
    PktsReceivedIpv6, "of PKTS_RECEIVED, those received over IPv6 (minor 9)";
    BadResponses, "responses the requester refused: an ACK or NAK outside what was sent, a READ response whose opcode or length is out of place (minor 9)";
    EthTxCsum, "transmitted frames whose checksum the Ethernet port computed (TX_CSUM, TSO segments not counted; minor 9)";
    EthTsoFrames, "TX_TSO frames the Ethernet port cut into segments (minor 9)";
    EthTsoSegments, "segments sent for those frames (each counted in ETH_TX_FRAMES too; minor 9)";
    PkeyViolations, "RoCE packets for a connected QP dropped for a P_Key outside the default partition 0xffff (minor 10)";
    StaleDoorbells, "SQ/RQ doorbells ignored because their index was behind the producer index already taken (minor 10)";
    RoceBadSource, "RoCE packets dropped for an impossible source: a group or, from the segment, the port's own MAC; a multicast, broadcast, unspecified, loopback or own source address; UDP source port 0 (minor 10; counted in ETH_RX_ERRORS before)";
    WireDelayed, "frames the wire's delay_us fault held back before sending (minor 10)";
    WireDelayDrops, "frames dropped because the wire already held its bound of delayed frames (minor 10)";
    PcapDropped, "frames the port's capture (--pcap) did not record: its size bound was reached, or a write failed (minor 10)";
    EngineTimeouts, "calls into the verbs engine (command, RESET, DMA_CTRL, ETH_CTRL) abandoned after the command timeout: never run, the device FATAL until a reset (minor 10)";
    BusMasterErrors, "DMA accesses refused because PCI bus mastering (COMMAND bit 2) is off (minor 10)";
    EqEvents, "asynchronous events written to the event queue (minor 11)";
    EqOverflows, "asynchronous events dropped: the event queue was full with its bound of events already waiting (minor 11)";
    Atomics, "atomic operations (compare-and-swap, fetch-and-add) executed as responder (minor 12)";
    AtomicsReplayed, "duplicate atomic requests (minor 14: and FLUSH and ATOMIC WRITE requests) answered from the results kept, not executed again (minor 12)";
    UcDropped, "UC messages the responder dropped: a packet missing, no RECV posted, a remote access or length error (minor 13)";
    Flushes, "RDMA FLUSH requests executed as responder (minor 14; duplicates answered again are not counted)";
    AtomicWrites, "ATOMIC WRITE requests executed as responder (minor 14; duplicates answered again are not counted)";
    UdSent, "UD messages sent (minor 16; loopback ones too)";
    UdReceived, "UD messages placed into a RECV (minor 16)";
    UdDropped, "UD messages the responder dropped: no RECV posted, or longer than the RECV less the GRH area (minor 16; a packet of another service than its QP's is in PKTS_DROPPED)";
    QkeyViolations, "UD messages dropped because their DETH Q_Key was not the receiving QP's (minor 16)";
}

/// The values of the counters of one RNIC, shared by whatever counts into them (the
/// engine, the DMA router, the fabric port).
pub struct Stats {
    values: [AtomicU64; COUNTERS.len()],
}

impl Default for Stats {
    fn default() -> Self {
        Stats { values: std::array::from_fn(|_| AtomicU64::new(0)) }
    }
}

impl Stats {
    pub fn add(&self, c: Counter, n: u64) {
        self.values[c as usize].fetch_add(n, Ordering::Relaxed);
    }

    pub fn inc(&self, c: Counter) {
        self.add(c, 1);
    }

    pub fn get(&self, c: Counter) -> u64 {
        self.values[c as usize].load(Ordering::Relaxed)
    }

    /// The counter at `index` (BAR0 reads), if there is one.
    pub fn by_index(&self, index: usize) -> Option<u64> {
        self.values.get(index).map(|v| v.load(Ordering::Relaxed))
    }

    pub fn reset(&self) {
        self.values.iter().for_each(|v| v.store(0, Ordering::Relaxed));
    }

    /// (name, value) pairs, for the host side.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        COUNTERS.iter().zip(&self.values).map(|((n, _), v)| (*n, v.load(Ordering::Relaxed))).collect()
    }
}
