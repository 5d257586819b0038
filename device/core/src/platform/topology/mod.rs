//! Topology files (`qemu-configs/*.toml`): which nodes exist, which PCI functions each has,
//! and where each sits in the PCIe tree. One file serves three uses (docs/architecture.md):
//! the QEMU command line (`qemu` in the `rnic-emu` crate), the server's node description
//! (`serve` in `rnic-emu-server`) and what tests expect. Format, with every field, in `qemu-configs/README.md`.
//! The `[timing]` table is the hardware's physical parameters ([`params`]); each node's
//! [`Layout`] (where its RNIC and GPU sit) is derived here, for the timing model
//! (`crate::observe::timing`) and the model summary the RNIC publishes.

pub mod params;

use crate::regs::pci_ids;
use params::Params;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum TopologyError {
    #[error("reading {path}")]
    Read { path: String, source: std::io::Error },
    #[error("parsing {path}")]
    Parse { path: String, source: Box<toml::de::Error> },
    #[error("topology {0}: {1}")]
    Invalid(String, String),
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub guest: GuestConfig,
    /// Physical parameters of the timing model (`docs/timing.md`); defaults when absent.
    #[serde(default)]
    pub timing: Params,
    #[serde(rename = "node")]
    pub nodes: Vec<Node>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GuestConfig {
    /// Guest RAM in MiB (shared memfd, so the server can DMA into it).
    pub memory_mib: u64,
    pub cpus: u32,
    /// QEMU `-cpu` model: `max` (Intel-like under TCG) or e.g. `EPYC-v4` for an AMD host bridge.
    pub cpu: String,
    /// Extra kernel command-line arguments.
    pub kernel_args: String,
    /// Extra QEMU arguments, appended verbatim (e.g. an IOMMU device).
    pub qemu_args: Vec<String>,
}

impl Default for GuestConfig {
    fn default() -> Self {
        GuestConfig { memory_mib: 1024, cpus: 2, cpu: "max".into(), kernel_args: String::new(), qemu_args: Vec::new() }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub name: String,
    /// The RNIC's IPv4 address on the fabric, the guest's address on its `rethN` (default
    /// 10.0.0.<11 + node index>, in 10.0.0.0/24).
    pub address: Option<std::net::Ipv4Addr>,
    /// Fault injection on this node's fabric traffic, per direction.
    #[serde(default)]
    pub faults: NodeFaults,
    /// Extra QEMU arguments for this node's guest only (e.g. a virtio-net link).
    #[serde(default)]
    pub qemu_args: Vec<String>,
    /// A NIC of QEMU's own on the fabric's segment (the guest's `eth0`): with no `device`,
    /// a plain node that joins the fabric as any stock QEMU guest would (Soft-RoCE on it).
    #[serde(default)]
    pub nic: Option<GuestNic>,
    #[serde(default, rename = "port")]
    pub ports: Vec<Port>,
    /// The node's PCI functions (none: a plain node, which needs a `nic`).
    #[serde(default, rename = "device")]
    pub devices: Vec<Device>,
}

/// Wire faults on one direction of a node's fabric traffic (probabilities 0..=1); the
/// fabric port (`rnic-emu-server`) applies them; PCIe-side faults are [`NodeFaults::pcie`].
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WireFaults {
    pub drop: f64,
    pub duplicate: f64,
    /// Probability that a packet is held back and sent after the next one.
    pub reorder: f64,
    /// Probability that one byte of a packet is flipped (the ICRC then fails).
    pub corrupt: f64,
    /// Extra delay of every packet, in microseconds.
    pub delay_us: u64,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NodeFaults {
    pub tx: WireFaults,
    pub rx: WireFaults,
    /// Seed of the fault generators (wire and PCIe), so a failing run reproduces.
    pub seed: u64,
    /// PCIe-side faults armed on the node's RNICs from the start, in the form
    /// `rnic-emu fault` takes (docs/faults.md), e.g. `"dma-write-fail count=2"`.
    pub pcie: Vec<String>,
}

impl WireFaults {
    pub fn validate(&self) -> Result<(), String> {
        let p = [self.drop, self.duplicate, self.reorder, self.corrupt];
        if p.iter().all(|v| (0.0..=1.0).contains(v)) && self.delay_us <= 1_000_000 {
            Ok(())
        } else {
            Err("fault probabilities must be within 0..=1 and delay_us at most 1000000".into())
        }
    }
}

/// A QEMU NIC on the fabric's segment.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum GuestNic {
    /// `virtio-net-pci`, MAC 52:54:00 and the low three bytes of the node's address.
    VirtioNet,
}

impl Node {
    /// A node with no emulated function: no server, a stock QEMU guest on the segment.
    pub fn is_plain(&self) -> bool {
        self.devices.is_empty()
    }

    /// The MAC of the node's [`GuestNic`] for the address `ip`.
    pub fn nic_mac(ip: std::net::Ipv4Addr) -> [u8; 6] {
        let o = ip.octets();
        [0x52, 0x54, 0x00, o[1], o[2], o[3]]
    }
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PortKind {
    /// A PCIe root port on the host bridge (QEMU `pcie-root-port`).
    RootPort,
    /// The upstream port of a PCIe switch (QEMU `x3130-upstream`).
    SwitchUpstream,
    /// A downstream port of a PCIe switch (QEMU `xio3130-downstream`).
    SwitchDownstream,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Port {
    pub id: String,
    pub kind: PortKind,
    /// The port this one hangs below (none for root ports).
    pub parent: Option<String>,
}

/// How RNIC traffic reaches a peer GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum P2pPath {
    /// The lowest common port is a PCIe switch port.
    Switch,
    /// The lowest common port is a root port, or there is none (host bridge).
    RootComplex,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    Rnic,
    Gpu,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    pub id: String,
    pub kind: DeviceKind,
    /// Root port or switch downstream port the function sits under.
    pub port: String,
    /// PCI function number within the slot (multi-function slots), 0..=7.
    #[serde(default)]
    pub function: u8,
    pub vendor_id: Option<u16>,
    pub device_id: Option<u16>,
    pub subsystem_vendor_id: Option<u16>,
    pub subsystem_id: Option<u16>,
    /// MSI-X vectors (RNIC only; the GPU has a fixed count).
    pub msix_vectors: Option<u16>,
    /// GPU BAR1 (memory aperture) size in MiB: a power of two; default 1024.
    pub bar1_mib: Option<u64>,
    /// What its PCI Express capability reports: the topology's `[timing]` link and
    /// payload sizes, filled in when the topology is parsed.
    #[serde(skip)]
    pub link: PcieLink,
    /// The timing parameters and its node's layout, filled in when the topology is
    /// parsed: the RNIC publishes the model summary they give
    /// (`crate::observe::timing::summary`).
    #[serde(skip)]
    pub timing: Option<Box<(Params, Layout)>>,
}

/// A function's PCIe link and payload sizes (from `[timing]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcieLink {
    pub gen: u8,
    pub width: u8,
    /// Max Payload Size supported, and the Max Read Request Size at reset (bytes).
    pub mps: u32,
    pub mrrs: u32,
}

impl PcieLink {
    pub fn of(p: &Params) -> PcieLink {
        PcieLink { gen: p.pcie_gen, width: p.pcie_width, mps: p.mps, mrrs: p.mrrs }
    }
}

impl Default for PcieLink {
    fn default() -> Self {
        PcieLink::of(&Params::default())
    }
}

/// Where the RNIC and the GPU sit in a node's PCIe tree (what the timing model's
/// latencies depend on; `crate::observe::timing::model` adds them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// PCIe switches between the RNIC and the root complex.
    pub rnic_switches: u32,
    /// Switches between the GPU and the root complex.
    pub gpu_switches: u32,
    /// How RNIC-to-GPU traffic travels.
    pub gpu_path: P2pPath,
}

impl Default for Layout {
    /// RNIC and GPU below one switch (the single-switch topology).
    fn default() -> Self {
        Layout { rnic_switches: 1, gpu_switches: 1, gpu_path: P2pPath::Switch }
    }
}

impl Layout {
    /// The layout of a topology node's first RNIC and first GPU (the default when the
    /// node has no GPU).
    pub fn of(node: &Node) -> Layout {
        let rnic = node.devices.iter().find(|d| d.kind == DeviceKind::Rnic);
        let gpu = node.devices.iter().find(|d| d.kind == DeviceKind::Gpu);
        let switches = |d| node.path_to_root(d).iter().filter(|p| p.kind == PortKind::SwitchUpstream).count() as u32;
        match (rnic, gpu) {
            (Some(r), Some(g)) => Layout { rnic_switches: switches(r), gpu_switches: switches(g), gpu_path: node.p2p_path(r, g) },
            (Some(r), None) => Layout { rnic_switches: switches(r), ..Layout::default() },
            _ => Layout::default(),
        }
    }
}

impl Device {
    pub fn vendor_id(&self) -> u16 {
        self.vendor_id.unwrap_or(pci_ids::VENDOR_ID)
    }

    pub fn device_id(&self) -> u16 {
        self.device_id.unwrap_or(match self.kind {
            DeviceKind::Rnic => pci_ids::RNIC_DEVICE_ID,
            DeviceKind::Gpu => pci_ids::GPU_DEVICE_ID,
        })
    }

    pub fn bar1_size(&self) -> u64 {
        self.bar1_mib.map_or(pci_ids::GPU_BAR1_DEFAULT_SIZE, |m| m << 20)
    }

    pub fn msix_vectors(&self) -> u16 {
        match self.kind {
            DeviceKind::Rnic => self.msix_vectors.unwrap_or(pci_ids::RNIC_MSIX_VECTORS),
            DeviceKind::Gpu => pci_ids::GPU_MSIX_VECTORS,
        }
    }
}

impl Topology {
    pub fn load(path: &Path) -> Result<Topology, TopologyError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TopologyError::Read { path: p.clone(), source })?;
        Topology::parse(&text, &p)
    }

    pub fn parse(text: &str, origin: &str) -> Result<Topology, TopologyError> {
        let mut topo: Topology = toml::from_str(text).map_err(|e| TopologyError::Parse { path: origin.to_string(), source: Box::new(e) })?;
        topo.validate()?;
        let link = PcieLink::of(&topo.timing);
        for n in &mut topo.nodes {
            let layout = Layout::of(n);
            for d in &mut n.devices {
                d.link = link;
                d.timing = Some(Box::new((topo.timing.clone(), layout)));
            }
        }
        Ok(topo)
    }

    fn invalid(&self, msg: String) -> TopologyError {
        TopologyError::Invalid(self.name.clone(), msg)
    }

    fn validate(&self) -> Result<(), TopologyError> {
        if self.nodes.is_empty() {
            return Err(self.invalid("no [[node]]".into()));
        }
        if self.nodes.len() > 64 {
            return Err(self.invalid("at most 64 nodes".into()));
        }
        let mut addrs = HashSet::new();
        for i in 0..self.nodes.len() {
            if !addrs.insert(self.address(i)) {
                return Err(self.invalid(format!("node {i}: address {} is used twice", self.address(i))));
            }
        }
        self.timing.validate().map_err(|e| self.invalid(e))?;
        if !(128..=65536).contains(&self.guest.memory_mib) || !(1..=16).contains(&self.guest.cpus) {
            return Err(self.invalid("guest memory_mib must be 128..=65536 and cpus 1..=16".into()));
        }
        let mut node_names = HashSet::new();
        for node in &self.nodes {
            if !node_names.insert(&node.name) || !is_ident(&node.name) {
                return Err(self.invalid(format!("node name '{}' is duplicated or not [A-Za-z0-9_-]+", node.name)));
            }
            self.validate_node(node)?;
        }
        Ok(())
    }

    fn validate_node(&self, node: &Node) -> Result<(), TopologyError> {
        let err = |m: String| self.invalid(format!("node {}: {m}", node.name));
        node.faults.tx.validate().and(node.faults.rx.validate()).map_err(&err)?;
        for text in &node.faults.pcie {
            match crate::platform::pcie_fault::spec::parse(text.split_whitespace()) {
                Ok(crate::platform::pcie_fault::Fault::Arm(_)) => {}
                Ok(_) => {
                    return Err(err(format!("faults.pcie '{text}': only faults that are armed (dma-*, poison, cqe-*, msi-lost, cmd-timeout) go in a topology")))
                }
                Err(e) => return Err(err(format!("faults.pcie '{text}': {e}"))),
            }
        }
        let mut ports: HashMap<&str, &Port> = HashMap::new();
        for p in &node.ports {
            if !is_ident(&p.id) || ports.insert(&p.id, p).is_some() {
                return Err(err(format!("port id '{}' is duplicated or not [A-Za-z0-9_-]+", p.id)));
            }
        }
        for p in &node.ports {
            let parent_kind = p.parent.as_deref().map(|id| ports.get(id).map(|pp| pp.kind));
            let ok = matches!(
                (p.kind, parent_kind),
                (PortKind::RootPort, None)
                    | (PortKind::SwitchUpstream, Some(Some(PortKind::RootPort | PortKind::SwitchDownstream)))
                    | (PortKind::SwitchDownstream, Some(Some(PortKind::SwitchUpstream)))
            );
            if !ok {
                return Err(err(format!(
                    "port '{}': a root-port has no parent, a switch-upstream hangs below a root-port or \
                     switch-downstream, a switch-downstream below a switch-upstream",
                    p.id
                )));
            }
        }
        let mut slots: HashMap<(&str, u8), &str> = HashMap::new();
        let mut ids = HashSet::new();
        for d in &node.devices {
            if !is_ident(&d.id) || !ids.insert(&d.id) {
                return Err(err(format!("device id '{}' is duplicated or not [A-Za-z0-9_-]+", d.id)));
            }
            match ports.get(d.port.as_str()).map(|p| p.kind) {
                Some(PortKind::RootPort | PortKind::SwitchDownstream) => {}
                _ => return Err(err(format!("device '{}': port '{}' is not a root-port or switch-downstream", d.id, d.port))),
            }
            if d.function > 7 || slots.insert((d.port.as_str(), d.function), &d.id).is_some() {
                return Err(err(format!("device '{}': function {} is out of range or taken", d.id, d.function)));
            }
            if let Some(mib) = d.bar1_mib {
                if d.kind != DeviceKind::Gpu || !mib.is_power_of_two() || !(1..=1 << 20).contains(&mib) {
                    return Err(err(format!("device '{}': bar1_mib is for GPUs, a power of two from 1 to 1048576", d.id)));
                }
            }
            if let Some(v) = d.msix_vectors {
                if d.kind != DeviceKind::Rnic || !(1..=64).contains(&v) {
                    return Err(err(format!("device '{}': msix_vectors is for RNICs, 1..=64", d.id)));
                }
            }
        }
        for &(port, f) in slots.keys() {
            if f != 0 && !slots.contains_key(&(port, 0)) {
                return Err(err(format!("port '{port}': function {f} without a function 0")));
            }
        }
        if node.is_plain() && node.nic.is_none() {
            return Err(err("no device and no nic: a plain node needs nic = \"virtio-net\"".into()));
        }
        if !node.is_plain() && !node.devices.iter().any(|d| d.kind == DeviceKind::Rnic) {
            return Err(err("no rnic device".into()));
        }
        Ok(())
    }

    /// The fabric address of node `index`.
    pub fn address(&self, index: usize) -> std::net::Ipv4Addr {
        self.nodes.get(index).and_then(|n| n.address).unwrap_or(std::net::Ipv4Addr::new(10, 0, 0, 11 + index as u8))
    }

    /// Finds a node by name or index.
    pub fn node(&self, which: &str) -> Option<(usize, &Node)> {
        if let Ok(i) = which.parse::<usize>() {
            return self.nodes.get(i).map(|n| (i, n));
        }
        self.nodes.iter().enumerate().find(|(_, n)| n.name == which)
    }
}

impl Node {
    pub fn port(&self, id: &str) -> Option<&Port> {
        self.ports.iter().find(|p| p.id == id)
    }

    /// Whether the slot holding `dev` has more than one function.
    pub fn is_multifunction_slot(&self, dev: &Device) -> bool {
        self.devices.iter().filter(|d| d.port == dev.port).count() > 1
    }

    /// The ports from a device up to the host bridge, nearest first.
    pub fn path_to_root(&self, dev: &Device) -> Vec<&Port> {
        let mut path = Vec::new();
        let mut cur = self.port(&dev.port);
        while let Some(p) = cur {
            if path.len() > self.ports.len() {
                break; // defensive: validated topologies have no cycles
            }
            path.push(p);
            cur = p.parent.as_deref().and_then(|id| self.port(id));
        }
        path
    }

    /// How peer-to-peer traffic between two functions of this node travels: through a PCIe
    /// switch when their lowest common port is a switch port, otherwise (a root port, or
    /// only the host bridge in common) through the root complex.
    pub fn p2p_path(&self, a: &Device, b: &Device) -> P2pPath {
        let up_a: Vec<&str> = self.path_to_root(a).iter().map(|p| p.id.as_str()).collect();
        let common = self.path_to_root(b).into_iter().find(|p| up_a.contains(&p.id.as_str()));
        match common.map(|p| p.kind) {
            Some(PortKind::SwitchUpstream | PortKind::SwitchDownstream) => P2pPath::Switch,
            _ => P2pPath::RootComplex,
        }
    }

    /// The socket file name of a device's vfio-user server.
    pub fn socket_name(&self, dev: &Device) -> String {
        format!("{}-{}.sock", self.name, dev.id)
    }
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.len() <= 32 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Topologies shared by the unit tests of the modules built on topologies (here and in
/// the `rnic-emu` crate's QEMU command lines).
#[doc(hidden)]
pub mod samples {
    /// GPU (function 0) and RNIC (function 1) of one slot below a root port.
    pub const MULTIFUNCTION: &str = r#"
        name = "t"
        [[node]]
        name = "n"
        port = [ { id = "rp0", kind = "root-port" } ]
        device = [ { id = "gpu0", kind = "gpu", port = "rp0", function = 0 },
                   { id = "rnic0", kind = "rnic", port = "rp0", function = 1 } ]
    "#;

    /// A single-switch node shared by the tests of the modules built on topologies.
    pub const SWITCH: &str = r#"
        name = "t"
        [[node]]
        name = "node0"
        port = [ { id = "rp0", kind = "root-port" },
                 { id = "up", kind = "switch-upstream", parent = "rp0" },
                 { id = "dn0", kind = "switch-downstream", parent = "up" },
                 { id = "dn1", kind = "switch-downstream", parent = "up" } ]
        device = [ { id = "rnic0", kind = "rnic", port = "dn0" },
                   { id = "gpu0", kind = "gpu", port = "dn1", bar1_mib = 256 } ]
    "#;
}

#[cfg(test)]
mod tests {
    use super::samples::*;
    use super::*;

    #[test]
    fn parses_switch_topology() {
        let t = Topology::parse(SWITCH, "test").unwrap();
        let (_, n) = t.node("node0").unwrap();
        let gpu = &n.devices[1];
        assert_eq!(gpu.bar1_size(), 256 << 20);
        assert_eq!(gpu.device_id(), pci_ids::GPU_DEVICE_ID);
        let path: Vec<&str> = n.path_to_root(gpu).iter().map(|p| p.id.as_str()).collect();
        assert_eq!(path, ["dn1", "up", "rp0"]);
        assert!(t.node("0").is_some() && t.node("1").is_none());
        assert_eq!(n.p2p_path(&n.devices[0], gpu), P2pPath::Switch);
    }

    #[test]
    fn p2p_paths_follow_the_lowest_common_port() {
        let roots = Topology::parse(
            &SWITCH.replace("port = \"dn1\"", "port = \"rp1\"").replace(
                "{ id = \"dn1\", kind = \"switch-downstream\", parent = \"up\" } ]",
                "{ id = \"dn1\", kind = \"switch-downstream\", parent = \"up\" }, { id = \"rp1\", kind = \"root-port\" } ]",
            ),
            "t",
        )
        .unwrap();
        let n = &roots.nodes[0];
        assert_eq!(n.p2p_path(&n.devices[0], &n.devices[1]), P2pPath::RootComplex, "separate root ports");
        let mf = Topology::parse(MULTIFUNCTION, "t").unwrap();
        let n = &mf.nodes[0];
        assert_eq!(n.p2p_path(&n.devices[1], &n.devices[0]), P2pPath::RootComplex, "one slot below a root port");
    }

    fn rejects(text: &str, what: &str) {
        let e = Topology::parse(text, "test").err().unwrap_or_else(|| panic!("accepted: {what}"));
        // The message and its causes, as `rnic-emu` prints them.
        let mut chain = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            chain = format!("{chain}: {c}");
            cause = c.source();
        }
        assert!(chain.contains(what), "{chain}");
    }

    #[test]
    fn rejects_bad_trees() {
        rejects(&SWITCH.replace("parent = \"rp0\"", "parent = \"nope\""), "switch-upstream hangs below");
        rejects(&SWITCH.replace("port = \"dn0\"", "port = \"up\""), "not a root-port or switch-downstream");
        rejects(&SWITCH.replace("port = \"dn1\"", "port = \"dn0\""), "function 0 is out of range or taken");
        rejects(&SWITCH.replace("bar1_mib = 256", "bar1_mib = 300"), "bar1_mib");
        rejects(&SWITCH.replace("kind = \"rnic\"", "kind = \"gpu\""), "no rnic");
        rejects(&SWITCH.replace("id = \"gpu0\"", "id = \"rnic0\""), "duplicated");
        rejects(&SWITCH.replace("name = \"t\"", "name = \"t\"\nbogus = 1"), "unknown field");
        rejects(&SWITCH.replace("name = \"t\"", "name = \"t\"\n[timing]\nmps = 100"), "mps and mrrs");
        rejects(&SWITCH.replace("name = \"t\"", "name = \"t\"\n[timing]\nlink_gbs = 1"), "unknown field");
    }

    #[test]
    fn layouts_come_from_the_topology_files() {
        let layout = |text: &str| Layout::of(&Topology::parse(text, "t").unwrap().nodes[0]);
        assert_eq!(layout(include_str!("../../../../../qemu-configs/single-switch.toml")), Layout::default());
        let rp = layout(include_str!("../../../../../qemu-configs/separate-root-ports.toml"));
        assert_eq!(rp, Layout { rnic_switches: 0, gpu_switches: 0, gpu_path: P2pPath::RootComplex });
        let mf = layout(include_str!("../../../../../qemu-configs/multifunction.toml"));
        assert_eq!(mf.gpu_path, P2pPath::RootComplex, "one slot below a root port");
    }

    #[test]
    fn the_timing_table_is_optional_and_partial() {
        let t = Topology::parse(SWITCH, "t").unwrap();
        assert_eq!(t.timing, Params::default());
        let t = Topology::parse(&SWITCH.replace("name = \"t\"", "name = \"t\"\n[timing]\npcie_gen = 4\nlink_gbps = 200.0"), "t").unwrap();
        assert_eq!((t.timing.pcie_gen, t.timing.link_gbps, t.timing.pcie_width), (4, 200.0, 16));
    }
}
