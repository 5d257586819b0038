//! The `control` fuzz target: arbitrary bytes as what a local client sends on a node's
//! control socket, cut into request lines as the server cuts them
//! (`rnic_emu_server::control::Lines`, bounded) and each answered by the server's
//! dispatcher (`Control::respond`) on an RNIC and its node's MMIO/DMA trace (no fabric:
//! `faults` requests are refused there). Every reply must be one JSON object.

use rnic_emu_core::observe::iotrace::IoTrace;
use rnic_emu_core::platform::topology::Topology;
use rnic_emu_core::rnic::Rnic;
use rnic_emu_server::control::{Control, Lines, MAX_REQUESTS};
use std::sync::{Arc, Mutex};

fn target() -> Option<Control> {
    let toml =
        "name = \"c\"\n[[node]]\nname = \"n\"\nport = [ { id = \"rp\", kind = \"root-port\" } ]\ndevice = [ { id = \"r\", kind = \"rnic\", port = \"rp\" } ]";
    let topo = Topology::parse(toml, "fuzz").ok()?;
    let mut rnic = Rnic::new("fuzz-rnic".into(), &topo.nodes[0].devices[0], Vec::new(), None).ok()?;
    let io = Arc::new(IoTrace::default());
    if !rnic.trace_into(io.clone()) {
        return None;
    }
    let f: rnic_emu_server::vfio::SharedFunction = Arc::new(Mutex::new(rnic));
    Some(Control { node: "n".into(), functions: vec![("n-r.sock".into(), f)], ports: Vec::new(), io })
}

/// Answers every request line of `data`, as one connection would send them.
pub fn control(data: &[u8]) {
    let Some(ctl) = target() else { return };
    let mut lines = Lines::default();
    lines.push(data);
    let answer = |line: &[u8]| {
        let reply = ctl.respond(line);
        assert!(serde_json::from_str::<serde_json::Value>(&reply).is_ok_and(|v| v.is_object()), "reply {reply:?} to {line:?}");
    };
    for _ in 0..MAX_REQUESTS {
        match lines.next_line() {
            Some(Ok(line)) => answer(&line),
            Some(Err(_)) => return, // the server replies with an error and closes
            None => {
                if let Some(rest) = lines.rest() {
                    answer(&rest);
                }
                return;
            }
        }
    }
}

/// Seed inputs: every request family, valid and not, and what no client should send.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut long = vec![b'x'; rnic_emu_server::control::MAX_LINE + 1];
    long.push(b'\n');
    vec![
        b"stats\n".to_vec(),
        b"iotrace on\niotrace since=0 max=4\niotrace off\niotrace since=oops\n".to_vec(),
        b"trace qp=1\ntrace\ntrace qp=oops\ntrace off\n".to_vec(),
        b"pcie\npcie link-down\npcie nonsense=1\n".to_vec(),
        b"faults tx drop=0.5\nfaults rx delay_us=9\nfaults\n".to_vec(),
        b"  stats  \r\n\n\nunknown words here\nstats".to_vec(),
        [&b"\xff\xfe\x00stats\n"[..], &crate::fuzzing::smoke_bytes(7, 256)].concat(),
        long,
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeds_and_random_bytes_get_json_replies() {
        for s in super::seeds() {
            super::control(&s);
        }
        for seed in 0..50 {
            super::control(&crate::fuzzing::smoke_bytes(seed, 512));
        }
    }
}
