//! The ring all_reduce model and its latency percentiles.
//!
//! Ring all_reduce of `bytes` over `n` nodes: 2(n-1) steps, each moving one chunk of
//! bytes/n to the next node and reducing it there. A step is:
//! - GPUDirect on: one RDMA WRITE GPU to GPU of the chunk (its [`timeline`] up to the
//!   remote CPU seeing the CQE) and the reduction in GPU memory (read two chunks, write
//!   one, at GPU memory bandwidth);
//! - GPUDirect off (host bounce): a staging copy GPU to host, the WRITE host to host,
//!   a staging copy host to GPU, the reduction; store and forward, each copy paying
//!   `copy_setup_ns` and moving at the copy bandwidth.
//!
//! Effective bandwidth is the bus bandwidth (as nccl-tests reports it): bytes x 2(n-1)/n
//! over the time, which is the chunk size over the step time.
//!
//! Latency percentiles: a message of one MTU sent on the ring's path waits behind the
//! ring's own traffic at the NIC's egress. The egress is a single server with
//! deterministic service (one full frame) at utilisation rho = the ring's wire share
//! (M/D/1); the mean wait is the Pollaczek-Khinchine value rho s / (2 (1 - rho)), and the
//! wait distribution is approximated by an exponential tail with P(wait > 0) = rho:
//! wait_p = (mean / rho) ln(rho / (1 - p)) when 1 - p < rho, else 0. Latency = the
//! message's modelled latency (doorbell to the remote CPU seeing it, plus the two
//! staging copies without GPUDirect) + wait_p. Not modelled: congestion in the network
//! (PFC, ECN), other tenants, host memory contention, retransmission.

use super::model::{timeline, Layout, Mem, Op, Request};
use super::params::Params;
use serde::Serialize;

#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Percentiles {
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Ring {
    pub nodes: u32,
    pub bytes: u64,
    pub gdr: bool,
    pub chunk: u64,
    pub step_us: f64,
    pub time_us: f64,
    /// Algorithm bandwidth (bytes / time) and bus bandwidth, GB/s.
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    /// The NIC egress utilisation the queueing model uses.
    pub utilisation: f64,
    pub latency: Percentiles,
}

/// One row of the design document's table (4 MB messages).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Reference {
    pub nodes: u32,
    pub fabric: &'static str,
    pub gdr: bool,
    pub latency: Percentiles,
    pub busbw_gbps: f64,
}

pub const REFERENCE: &[Reference] = &[
    Reference { nodes: 8, fabric: "RoCEv2 400G", gdr: true, latency: Percentiles { p50_us: 4.5, p99_us: 6.2, p999_us: 12.5 }, busbw_gbps: 48.5 },
    Reference { nodes: 8, fabric: "RoCEv2 400G", gdr: false, latency: Percentiles { p50_us: 18.5, p99_us: 25.0, p999_us: 45.2 }, busbw_gbps: 18.2 },
    Reference { nodes: 128, fabric: "IB NDR 400G", gdr: true, latency: Percentiles { p50_us: 5.1, p99_us: 7.8, p999_us: 15.3 }, busbw_gbps: 49.2 },
    Reference { nodes: 128, fabric: "IB NDR 400G", gdr: false, latency: Percentiles { p50_us: 22.0, p99_us: 35.4, p999_us: 68.5 }, busbw_gbps: 16.5 },
];

/// The design document's row for `nodes` and `gdr`, if it has one.
pub fn reference(nodes: u32, gdr: bool) -> Option<&'static Reference> {
    REFERENCE.iter().find(|r| r.nodes == nodes && r.gdr == gdr)
}

fn copy_ns(p: &Params, bytes: u64) -> f64 {
    p.copy_setup_ns + bytes as f64 / p.copy_gbps()
}

/// Doorbell to the remote CPU seeing the CQE, for one WRITE of `len` bytes; with the
/// staging copies when there is no GPUDirect.
fn message_ns(p: &Params, l: &Layout, len: u64, gdr: bool) -> f64 {
    let mem = if gdr { Mem::Gpu } else { Mem::Host };
    let t = timeline(p, l, &Request { op: Op::Write, len, src: mem, dst: mem });
    let wire = t.at("remote_cpu").unwrap_or(0.0);
    if gdr {
        wire
    } else {
        wire + 2.0 * copy_ns(p, len)
    }
}

/// The wait at quantile `q` of the M/D/1 egress (exponential tail approximation).
pub fn wait_ns(rho: f64, service_ns: f64, q: f64) -> f64 {
    if rho <= 0.0 || 1.0 - q >= rho {
        return 0.0;
    }
    let mean = rho * service_ns / (2.0 * (1.0 - rho));
    mean / rho * (rho / (1.0 - q)).ln()
}

/// Ring all_reduce of `bytes` over `nodes` nodes (at least 2), GPUDirect on or off.
pub fn ring_all_reduce(p: &Params, l: &Layout, nodes: u32, bytes: u64, gdr: bool) -> Ring {
    let n = u64::from(nodes.max(2));
    let chunk = bytes.div_ceil(n).max(1);
    let reduce = 3.0 * chunk as f64 / p.gpu_mem_gbps;
    let step = message_ns(p, l, chunk, gdr) + reduce;
    let steps = 2 * (n - 1);
    let time = steps as f64 * step;
    let algbw = bytes as f64 / time;
    let busbw = algbw * steps as f64 / n as f64;
    let rho = (busbw / p.wire_goodput()).min(0.999);
    let base = message_ns(p, l, chunk.min(u64::from(p.mtu)), gdr);
    let s = p.frame_ns(p.mtu, 0);
    let at = |q| (base + wait_ns(rho, s, q)) / 1000.0;
    Ring {
        nodes: n as u32,
        bytes,
        gdr,
        chunk,
        step_us: step / 1000.0,
        time_us: time / 1000.0,
        algbw_gbps: algbw,
        busbw_gbps: busbw,
        utilisation: rho,
        latency: Percentiles { p50_us: at(0.5), p99_us: at(0.99), p999_us: at(0.999) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_nodes_4mib_give_the_reference_bandwidth_with_and_without_gpudirect() {
        let p = Params::default();
        for gdr in [true, false] {
            let r = ring_all_reduce(&p, &Layout::default(), 8, 4 << 20, gdr);
            let want = reference(8, gdr).unwrap().busbw_gbps;
            let err = (r.busbw_gbps - want).abs() / want;
            assert!(err <= 0.15, "gdr {gdr}: modelled {:.1} GB/s, reference {want} GB/s", r.busbw_gbps);
            assert!(r.latency.p50_us <= r.latency.p99_us && r.latency.p99_us <= r.latency.p999_us);
        }
        let on = ring_all_reduce(&p, &Layout::default(), 8, 4 << 20, true);
        let off = ring_all_reduce(&p, &Layout::default(), 8, 4 << 20, false);
        assert!(on.busbw_gbps > 2.0 * off.busbw_gbps, "the host bounce costs more than half");
        assert!(off.latency.p50_us > on.latency.p50_us);
    }

    #[test]
    fn the_queueing_tail_grows_with_utilisation() {
        assert_eq!(wait_ns(0.3, 100.0, 0.5), 0.0, "most messages do not wait at 30% load");
        assert!(wait_ns(0.9, 100.0, 0.99) > wait_ns(0.5, 100.0, 0.99));
        assert!(wait_ns(0.9, 100.0, 0.999) > wait_ns(0.9, 100.0, 0.99));
        // Mean of the approximation equals the Pollaczek-Khinchine mean: check a point.
        let w = wait_ns(0.5, 100.0, 1.0 - 0.5 * (-1.0f64).exp());
        assert!((w - 100.0).abs() < 1e-6, "{w}");
    }
}
