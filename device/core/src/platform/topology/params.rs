//! The physical parameters of the hardware a topology describes (`[timing]` in a
//! topology file) and the rates derived from them: what the timing model
//! (`crate::observe::timing`) computes with, and what the functions' PCI Express
//! capabilities report (link generation, width, payload sizes). Part of the topology so
//! that parsing one needs nothing above it. Every default is documented in `docs/timing.md` with its
//! source: a public specification where one exists (PCIe Base Specification, IEEE 802.3,
//! IBTA, JEDEC DDR5), otherwise a published typical figure (switch product briefs, the
//! pcie-bench measurements of device reads of host memory), each stated as such. None is
//! chosen to match the reference timeline; `qemu-configs/reference-timing.toml`
//! is the separate parameter set that does. Nothing here is measured; the model is
//! deterministic.

use serde::{Deserialize, Serialize};

/// RoCEv2 bytes per packet besides the payload: Ethernet header 14, IPv4 20, UDP 8,
/// BTH 12, ICRC 4, FCS 4 (IBTA Annex A17; IEEE 802.3 clause 3).
pub const ROCE_HEADERS: u32 = 14 + 20 + 8 + 12 + 4 + 4;
/// Per-frame line overhead: preamble and SFD 8, minimum inter-packet gap 12 (IEEE 802.3).
pub const ETH_LINE_OVERHEAD: u32 = 8 + 12;
/// InfiniBand bytes per packet besides the payload: LRH 8, BTH 12, ICRC 4, VCRC 2 (IBTA
/// Volume 1, chapters 5 and 7); the link's delimiters and idles are not counted.
pub const IB_HEADERS: u32 = 8 + 12 + 4 + 2;
/// RETH (first packet of a WRITE, every READ request) and AETH (ACK) sizes (IBTA 9.3).
pub const RETH: u32 = 16;
pub const AETH: u32 = 4;
/// Bytes of a WQE and of a CQE (this device's ABI, docs/verbs.md).
pub const WQE_BYTES: u32 = 64;
pub const CQE_BYTES: u32 = 32;

/// The network between the nodes.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
pub enum Fabric {
    /// RoCEv2 over Ethernet (IEEE 802.3 framing).
    #[default]
    #[serde(rename = "roce")]
    Roce,
    /// InfiniBand NDR (IBTA framing, credit-based links).
    #[serde(rename = "ib-ndr")]
    IbNdr,
}

impl std::str::FromStr for Fabric {
    type Err = String;
    fn from_str(s: &str) -> Result<Fabric, String> {
        match s {
            "roce" => Ok(Fabric::Roce),
            "ib-ndr" => Ok(Fabric::IbNdr),
            _ => Err(format!("unknown fabric '{s}' (roce, ib-ndr)")),
        }
    }
}

impl Fabric {
    pub fn name(self) -> &'static str {
        match self {
            Fabric::Roce => "RoCEv2",
            Fabric::IbNdr => "InfiniBand NDR",
        }
    }

    /// Bytes a packet costs on the line besides its payload and transport extension
    /// headers (RETH, AETH).
    pub fn packet_overhead(self) -> u32 {
        match self {
            Fabric::Roce => ROCE_HEADERS + ETH_LINE_OVERHEAD,
            Fabric::IbNdr => IB_HEADERS,
        }
    }

    /// A fabric switch's idle port-to-port latency (ns) when `[timing]` does not set one.
    pub fn switch_ns(self) -> f64 {
        match self {
            Fabric::Roce => 300.0,
            Fabric::IbNdr => 150.0,
        }
    }
}

/// The timing parameters of one topology.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Params {
    /// RNIC core clock (MHz); fixed pipeline steps cost whole cycles of it.
    pub core_clock_mhz: f64,
    /// PCIe generation (1..=6) and width (lanes) of the RNIC's and the GPU's links.
    pub pcie_gen: u8,
    pub pcie_width: u8,
    /// Max Payload Size and Max Read Request Size (bytes, 128..=4096, powers of two).
    pub mps: u32,
    pub mrrs: u32,
    /// One crossing of a PCIe switch (ns, idle, cut-through, port to port).
    pub switch_latency_ns: f64,
    /// One crossing of the root complex between a root port and the memory controller
    /// (ns, idle, one way: root port, I/O hub, on-chip mesh).
    pub rc_latency_ns: f64,
    /// Host DRAM access time at the memory controller (ns, a row miss).
    pub host_mem_latency_ns: f64,
    /// Host memory bandwidth (GB/s) for the staging copies of a host bounce.
    pub host_mem_gbps: f64,
    /// GPU memory access time behind BAR1 (ns, a row miss) and bandwidth (GB/s, for
    /// reductions).
    pub gpu_mem_latency_ns: f64,
    pub gpu_mem_gbps: f64,
    /// Staging copy bandwidth GPU <-> host for a bounce (GB/s); 0: the GPU link's
    /// payload rate (a copy engine streaming over PCIe).
    pub host_copy_gbps: f64,
    /// Fixed cost of one staging copy (launch and completion), ns.
    pub copy_setup_ns: f64,
    /// The network: framing and the fabric switch's default latency.
    pub fabric: Fabric,
    /// Network link rate (Gb/s, data rate after line coding), path MTU (payload bytes).
    pub link_gbps: f64,
    pub mtu: u32,
    /// Propagation on one cable (ns), NIC or switch port to the next.
    pub wire_latency_ns: f64,
    /// PHY latency of one link (ns): PCS, FEC encode and decode, SerDes, both ends.
    pub phy_latency_ns: f64,
    /// One fabric switch crossing (ns, idle, cut-through); absent: the fabric's figure.
    pub fabric_switch_ns: Option<f64>,
    /// Ports of a fabric switch: up to radix/2 nodes share one leaf switch, more need
    /// a two-level fat tree (three switch crossings between leaves).
    pub switch_radix: u32,
    /// From a CQE landing in host memory to the polling CPU seeing it (ns).
    pub cpu_poll_ns: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            core_clock_mhz: 300.0,
            pcie_gen: 5,
            pcie_width: 16,
            mps: 512,
            mrrs: 512,
            switch_latency_ns: 100.0,
            rc_latency_ns: 200.0,
            host_mem_latency_ns: 50.0,
            host_mem_gbps: 307.2,
            gpu_mem_latency_ns: 50.0,
            gpu_mem_gbps: 3350.0,
            host_copy_gbps: 0.0,
            copy_setup_ns: 1000.0,
            fabric: Fabric::Roce,
            link_gbps: 400.0,
            mtu: 4096,
            wire_latency_ns: 10.0,
            phy_latency_ns: 50.0,
            fabric_switch_ns: None,
            switch_radix: 64,
            cpu_poll_ns: 100.0,
        }
    }
}

fn pow2_in(v: u32, lo: u32, hi: u32) -> bool {
    v.is_power_of_two() && (lo..=hi).contains(&v)
}

impl Params {
    /// Checks ranges; the message names the first bad field.
    pub fn validate(&self) -> Result<(), String> {
        let floats = [
            ("core_clock_mhz", self.core_clock_mhz, 1.0, 10_000.0),
            ("switch_latency_ns", self.switch_latency_ns, 0.0, 1e6),
            ("rc_latency_ns", self.rc_latency_ns, 0.0, 1e6),
            ("host_mem_latency_ns", self.host_mem_latency_ns, 0.0, 1e6),
            ("host_mem_gbps", self.host_mem_gbps, 0.1, 1e5),
            ("gpu_mem_latency_ns", self.gpu_mem_latency_ns, 0.0, 1e6),
            ("gpu_mem_gbps", self.gpu_mem_gbps, 0.1, 1e6),
            ("host_copy_gbps", self.host_copy_gbps, 0.0, 1e5),
            ("copy_setup_ns", self.copy_setup_ns, 0.0, 1e9),
            ("link_gbps", self.link_gbps, 0.1, 1e5),
            ("wire_latency_ns", self.wire_latency_ns, 0.0, 1e9),
            ("phy_latency_ns", self.phy_latency_ns, 0.0, 1e9),
            ("fabric_switch_ns", self.fabric_switch(), 0.0, 1e9),
            ("cpu_poll_ns", self.cpu_poll_ns, 0.0, 1e9),
        ];
        for (name, v, lo, hi) in floats {
            if !(v.is_finite() && (lo..=hi).contains(&v)) {
                return Err(format!("[timing] {name} must be within {lo}..={hi}"));
            }
        }
        if !(1..=6).contains(&self.pcie_gen) || ![1, 2, 4, 8, 16, 32].contains(&self.pcie_width) {
            return Err("[timing] pcie_gen must be 1..=6 and pcie_width 1, 2, 4, 8, 16 or 32".into());
        }
        if !(2..=1024).contains(&self.switch_radix) {
            return Err("[timing] switch_radix must be 2..=1024".into());
        }
        if !pow2_in(self.mps, 128, 4096) || !pow2_in(self.mrrs, 128, 4096) || !pow2_in(self.mtu, 256, 4096) {
            return Err("[timing] mps and mrrs must be powers of two in 128..=4096, mtu in 256..=4096".into());
        }
        Ok(())
    }

    /// One core clock cycle (ns).
    pub fn cycle_ns(&self) -> f64 {
        1000.0 / self.core_clock_mhz
    }

    /// Transfer rate per lane (GT/s) of the PCIe generation (PCIe Base Specification).
    pub fn pcie_gts(&self) -> f64 {
        [2.5, 5.0, 8.0, 16.0, 32.0, 64.0][usize::from(self.pcie_gen.clamp(1, 6)) - 1]
    }

    /// Link bytes per ns after line encoding: 8b/10b (Gen1-2), 128b/130b (Gen3-5),
    /// 242/256 FLITs (Gen6, PAM4 with FEC and CRC).
    pub fn pcie_raw_gbps(&self) -> f64 {
        let enc = match self.pcie_gen {
            1 | 2 => 0.8,
            6 => 242.0 / 256.0,
            _ => 128.0 / 130.0,
        };
        self.pcie_gts() * f64::from(self.pcie_width) * enc / 8.0
    }

    /// Per-TLP overhead (bytes): header (12 for a completion, 16 for a 64-bit memory
    /// request), sequence number 2 and LCRC 4, framing 4 (STP token, Gen3+) or 2 (Gen1-2).
    pub fn tlp_overhead(&self, header: u32) -> u32 {
        header + 6 + if self.pcie_gen <= 2 { 2 } else { 4 }
    }

    /// Payload GB/s (= bytes/ns) of a stream of TLPs carrying `payload` bytes each.
    pub fn pcie_payload_gbps(&self, payload: u32, header: u32) -> f64 {
        let p = f64::from(payload);
        self.pcie_raw_gbps() * p / (p + f64::from(self.tlp_overhead(header)))
    }

    /// Nanoseconds to move `bytes` over the link in TLPs of at most `max` payload bytes.
    pub fn pcie_ns(&self, bytes: u64, max: u32, header: u32) -> f64 {
        if bytes == 0 {
            return f64::from(self.tlp_overhead(header)) / self.pcie_raw_gbps();
        }
        let tlps = bytes.div_ceil(u64::from(max));
        (bytes + tlps * u64::from(self.tlp_overhead(header))) as f64 / self.pcie_raw_gbps()
    }

    /// Read completions: payload of at most MPS per completion (3-DW header).
    pub fn read_ns(&self, bytes: u64) -> f64 {
        self.pcie_ns(bytes, self.mps, 12)
    }

    /// Posted writes: at most MPS each (4-DW header, 64-bit addresses).
    pub fn write_ns(&self, bytes: u64) -> f64 {
        self.pcie_ns(bytes, self.mps, 16)
    }

    /// The network link in bytes per ns.
    pub fn link_bytes_per_ns(&self) -> f64 {
        self.link_gbps / 8.0
    }

    /// Time on the wire of a frame with `payload` bytes and `extra` transport header bytes.
    pub fn frame_ns(&self, payload: u32, extra: u32) -> f64 {
        f64::from(payload + extra + self.fabric.packet_overhead()) / self.link_bytes_per_ns()
    }

    /// One fabric switch crossing (ns).
    pub fn fabric_switch(&self) -> f64 {
        self.fabric_switch_ns.unwrap_or_else(|| self.fabric.switch_ns())
    }

    /// Fabric switches between two nodes of a job of `nodes` nodes: one leaf while they
    /// fit on half its ports, else leaf, spine, leaf.
    pub fn fabric_switches(&self, nodes: u32) -> u32 {
        if nodes <= self.switch_radix / 2 {
            1
        } else {
            3
        }
    }

    /// One-way latency from NIC to NIC (ns) in a job of `nodes` nodes, first bit to
    /// first bit (serialization is counted by [`Self::frame_ns`]): every link's cable and
    /// PHY, every switch crossing.
    pub fn fabric_one_way_ns(&self, nodes: u32) -> f64 {
        let switches = self.fabric_switches(nodes);
        f64::from(switches + 1) * (self.wire_latency_ns + self.phy_latency_ns) + f64::from(switches) * self.fabric_switch()
    }

    /// Payload bytes per ns the wire carries in full-MTU packets.
    pub fn wire_goodput(&self) -> f64 {
        f64::from(self.mtu) / self.frame_ns(self.mtu, 0)
    }

    /// Bandwidth of a staging copy between GPU and host memory (bytes per ns).
    pub fn copy_gbps(&self) -> f64 {
        let link = self.pcie_payload_gbps(self.mps, 16);
        let dram = self.host_mem_gbps;
        if self.host_copy_gbps > 0.0 {
            self.host_copy_gbps.min(link).min(dram)
        } else {
            link.min(dram)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gen5_x16_rates_follow_the_specification() {
        let p = Params::default();
        assert!((p.pcie_raw_gbps() - 63.015).abs() < 0.01, "32 GT/s x16, 128b/130b");
        assert!((p.pcie_payload_gbps(512, 12) - 60.42).abs() < 0.01, "512-byte completions");
        assert!((p.wire_goodput() - 49.02).abs() < 0.01, "400 Gb/s RoCEv2, 4096-byte MTU");
        let ib = Params { fabric: Fabric::IbNdr, ..p.clone() };
        assert!((ib.wire_goodput() - 49.69).abs() < 0.01, "400 Gb/s NDR, 4096-byte MTU, 26 header bytes");
        assert_eq!((p.fabric_switches(8), p.fabric_switches(128)), (1, 3), "one leaf of 64 ports, then a fat tree");
        assert_eq!(p.fabric_one_way_ns(2), 2.0 * (10.0 + 50.0) + 300.0);
        assert_eq!(ib.fabric_one_way_ns(128), 4.0 * (10.0 + 50.0) + 3.0 * 150.0);
        assert!((p.cycle_ns() - 3.333).abs() < 0.001);
        let gen1 = Params { pcie_gen: 1, pcie_width: 1, ..p.clone() };
        assert!((gen1.pcie_raw_gbps() - 0.25).abs() < 1e-9, "2.5 GT/s, 8b/10b");
        assert!(p.validate().is_ok());
        assert!(Params { mps: 384, ..p.clone() }.validate().is_err());
        assert!(Params { link_gbps: f64::NAN, ..p }.validate().is_err());
    }
}
