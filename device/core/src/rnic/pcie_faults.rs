//! The RNIC's side of PCIe fault injection (docs/faults.md): the `pcie ...` control
//! requests, and the faults that change the function's own registers or configuration
//! space at once: AER errors (status registers of the AER capability and Device Status),
//! link down/up, asynchronous events, fatal and FLR-required states, spurious MSI-X. The
//! armed faults live in [`crate::platform::pcie_fault::PcieFaults`], which the DMA router,
//! the interrupt block, the completion path and the command register consult.
//!
//! What the guest cannot see here: an AER error is not sent upstream as an ERR_COR /
//! ERR_NONFATAL / ERR_FATAL message (QEMU's vfio-user client has no path for one), so the
//! device also reports it as ASYNC_ERR_AER on the async vector.

use super::Rnic;
use crate::contract::abi::{ASYNC_ERR_AER, ASYNC_ERR_FLR_REQUIRED};
use crate::contract::counters::Counter;
use crate::platform::pci::caps::EXT_CAP_ID_AER;
use crate::platform::pcie_fault::{self, Count, Fault, Now};
use crate::platform::topology::NodeFaults;
use crate::regs::rnic::DMA_CTRL;
use crate::regs::rnic::DMA_CTRL_INT_ENABLE;
use crate::rnic::verbs::engine::ASYNC_VECTOR;
use std::sync::atomic::Ordering;

// AER capability registers (PCIe Base 5.0 §7.8.4).
const AER_UNCOR_STATUS: usize = 0x04;
const AER_UNCOR_MASK: usize = 0x08;
const AER_UNCOR_SEVERITY: usize = 0x0c;
const AER_COR_STATUS: usize = 0x10;
const AER_COR_MASK: usize = 0x14;
const AER_CAP_CONTROL: usize = 0x18;
/// First Error Pointer: the uncorrectable status bit that was set first.
const AER_FEP_MASK: u32 = 0x1f;
// Device Status bits of the PCI Express capability (§7.5.3.5).
const PCIE_DEVSTA: usize = 0x0a;
const DEVSTA_CED: u32 = 1 << 0;
const DEVSTA_NFED: u32 = 1 << 1;
const DEVSTA_FED: u32 = 1 << 2;

impl Rnic {
    /// Arms the topology's `[node.faults] pcie` faults with its seed (validated already).
    pub fn arm_faults(&mut self, faults: &NodeFaults) -> Result<(), String> {
        self.faults.seed(faults.seed);
        for text in &faults.pcie {
            match pcie_fault::spec::parse(text.split_whitespace())? {
                Fault::Arm(rule) => self.faults.arm(rule),
                _ => return Err(format!("'{text}': a topology arms faults; immediate ones go to `rnic-emu fault`")),
            }
        }
        Ok(())
    }

    /// `pcie [dev=NAME] <fault>` and `pcie [dev=NAME] status`. None: the request names
    /// another function.
    pub(super) fn fault_control(&mut self, words: &[&str]) -> Option<Result<String, String>> {
        let mut words = words;
        if let Some(dev) = words.first().and_then(|w| w.strip_prefix("dev=")) {
            if self.name != dev && !self.name.ends_with(&format!("-{dev}")) {
                return None;
            }
            words = &words[1..];
        }
        if words == ["status"] {
            return Some(Ok(self.fault_status()));
        }
        let result = pcie_fault::spec::parse(words.iter().copied()).map(|f| {
            log::warn!("{}: fault injected: {}", self.name, words.join(" "));
            match f {
                Fault::Arm(rule) => {
                    self.faults.arm(rule);
                    format!("{}: armed {}", self.name, pcie_fault::describe(&rule))
                }
                Fault::Clear => {
                    self.faults.clear();
                    format!("{}: armed faults cleared", self.name)
                }
                Fault::Seed(s) => {
                    self.faults.seed(s);
                    format!("{}: fault seed {s}", self.name)
                }
                Fault::Now(now) => self.fault_now(now),
            }
        });
        Some(result)
    }

    /// Counters and armed faults as JSON.
    fn fault_status(&self) -> String {
        let counts: serde_json::Map<String, serde_json::Value> =
            self.faults.snapshot().into_iter().map(|(k, v)| (crate::contract::render::snake_lower(k), v.into())).collect();
        let armed: Vec<String> = self.faults.rules().iter().map(pcie_fault::describe).collect();
        serde_json::json!({ "function": self.name, "link_down": self.faults.link_down(), "flr_required": self.faults.flr_required(), "armed": armed, "counters": counts }).to_string()
    }

    fn fault_now(&mut self, now: Now) -> String {
        match now {
            Now::MsiSpurious { vector } => {
                self.faults.count(Count::FaultMsiSpurious);
                let sent = self.irqs.inject(usize::from(vector));
                format!("{}: spurious MSI-X on vector {vector} {}", self.name, if sent { "sent" } else { "not sent (vector not enabled)" })
            }
            Now::Async { code, index } => {
                self.faults.count(Count::FaultAsync);
                self.async_event(code, index);
                format!("{}: async event code {code} index {index}", self.name)
            }
            Now::Fatal => {
                self.faults.count(Count::FaultFatal);
                self.engine.inject_fatal(&self.router);
                format!("{}: engine fatal (STATUS_FATAL) until reset", self.name)
            }
            Now::FlrRequired => {
                self.faults.count(Count::FaultFlrRequired);
                self.faults.set_flr_required(true);
                self.engine.inject_fatal(&self.router);
                self.async_event(ASYNC_ERR_FLR_REQUIRED, 0);
                format!("{}: FLR required (STATUS_FLR_REQUIRED) until a Function Level Reset", self.name)
            }
            Now::Aer { uncorrectable, bit } => self.aer(uncorrectable, bit),
            Now::Link { up: false } => {
                self.faults.set_link_down(true);
                // No access starts from now on (the fault hook) and the chunk under way ends
                // before the request returns.
                if !self.router.gate.set_link(false) {
                    log::error!("{}: DMA under way did not end within {:?} of the link going down", self.name, crate::platform::mem::gate::GATE_WAIT);
                }
                format!("{}: link down: configuration and BAR reads return all-ones", self.name)
            }
            Now::Link { up: true } => {
                self.faults.set_link_down(false);
                // Back from a surprise removal: the function starts over, as after a hot
                // reset; its statistics stay readable (as after a client disconnect).
                use crate::function::PciFunction;
                self.faults.set_flr_required(false);
                self.disconnect();
                self.router.gate.set_link(true); // DMA again once the engine forgot its objects
                format!("{}: link up: function reset", self.name)
            }
        }
    }

    /// Latches an async event in RNIC_REG_LAST_ERROR and raises the async vector (when the
    /// driver enabled interrupts).
    pub(super) fn async_event(&mut self, code: u32, index: u32) {
        self.last_error.store(u64::from(code) << 24 | u64::from(index & 0xff_ffff), Ordering::SeqCst);
        if self.regs.get(DMA_CTRL) & DMA_CTRL_INT_ENABLE != 0 && self.irqs.trigger(ASYNC_VECTOR) {
            self.stats.inc(Counter::Interrupts);
        }
    }

    /// Logs an AER error the way a function does (status bit, First Error Pointer, Device
    /// Status) and, unless masked, reports it as ASYNC_ERR_AER.
    fn aer(&mut self, uncorrectable: bool, bit: u8) -> String {
        let Some(aer) = self.config.extended_capability(EXT_CAP_ID_AER) else {
            return format!("{}: no AER capability", self.name);
        };
        let pcie = self.config.pcie_capability();
        let mask = 1u32 << bit;
        let (masked, severity) = if uncorrectable {
            self.faults.count(Count::FaultAerUncorrectable);
            if self.config.get32(aer + AER_UNCOR_STATUS) == 0 {
                self.config.set_field32(aer + AER_CAP_CONTROL, AER_FEP_MASK, u32::from(bit));
            }
            self.config.latch32(aer + AER_UNCOR_STATUS, mask);
            let fatal = self.config.get32(aer + AER_UNCOR_SEVERITY) & mask != 0;
            (self.config.get32(aer + AER_UNCOR_MASK) & mask != 0, if fatal { 2 } else { 1 })
        } else {
            self.faults.count(Count::FaultAerCorrectable);
            self.config.latch32(aer + AER_COR_STATUS, mask);
            (self.config.get32(aer + AER_COR_MASK) & mask != 0, 0)
        };
        if let Some(p) = pcie {
            self.config.latch32(p + PCIE_DEVSTA, [DEVSTA_CED, DEVSTA_NFED, DEVSTA_FED][severity as usize]);
        }
        if !masked {
            self.async_event(ASYNC_ERR_AER, severity);
        }
        let kind = ["correctable", "uncorrectable non-fatal", "uncorrectable fatal"][severity as usize];
        format!("{}: AER {kind} error, status bit {bit}{}", self.name, if masked { " (masked: logged, not reported)" } else { "" })
    }

    /// Merges the AER bits the data path raised (a poisoned read) into configuration space.
    pub(super) fn sync_aer(&mut self) {
        let (cor, uncor) = self.faults.take_aer();
        if cor | uncor == 0 {
            return;
        }
        let Some(aer) = self.config.extended_capability(EXT_CAP_ID_AER) else { return };
        if uncor != 0 && self.config.get32(aer + AER_UNCOR_STATUS) == 0 {
            self.config.set_field32(aer + AER_CAP_CONTROL, AER_FEP_MASK, uncor.trailing_zeros());
        }
        self.config.latch32(aer + AER_UNCOR_STATUS, uncor);
        self.config.latch32(aer + AER_COR_STATUS, cor);
        if let Some(p) = self.config.pcie_capability() {
            let nonfatal = uncor & !self.config.get32(aer + AER_UNCOR_SEVERITY) != 0;
            let fatal = uncor & self.config.get32(aer + AER_UNCOR_SEVERITY) != 0;
            let bits = [(cor != 0, DEVSTA_CED), (nonfatal, DEVSTA_NFED), (fatal, DEVSTA_FED)];
            self.config.latch32(p + PCIE_DEVSTA, bits.iter().filter(|b| b.0).fold(0, |a, b| a | b.1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::abi::*;
    use crate::function::PciFunction;
    use crate::regs::rnic::*;

    fn rnic() -> Rnic {
        let t = crate::platform::topology::Topology::parse(crate::platform::topology::samples::SWITCH, "t").unwrap();
        let dev = t.nodes[0].devices.iter().find(|d| d.kind == crate::platform::topology::DeviceKind::Rnic).unwrap();
        let mut r = Rnic::new("n-r".into(), dev, Vec::new(), None).unwrap();
        let on = crate::platform::pci::config::COMMAND_MEMORY | crate::platform::pci::config::COMMAND_BUS_MASTER;
        r.config_mut().write(crate::platform::pci::config::COMMAND, &on.to_le_bytes());
        r.config_written();
        r
    }

    fn rd(r: &mut Rnic, off: u64) -> u32 {
        let mut b = [0u8; 4];
        r.bar_read(0, off, &mut b);
        u32::from_le_bytes(b)
    }

    fn cfg(r: &mut Rnic, off: usize) -> u32 {
        let mut b = [0u8; 4];
        r.config_read(off, &mut b);
        u32::from_le_bytes(b)
    }

    fn fault(r: &mut Rnic, text: &str) -> Result<String, String> {
        r.control(&format!("pcie {text}")).expect("the RNIC takes pcie requests")
    }

    #[test]
    fn link_down_reads_all_ones_until_link_up_resets_the_function() {
        let mut r = rnic();
        r.bar_write(0, RNIC_REG_SCRATCH, &7u32.to_le_bytes());
        fault(&mut r, "link down").unwrap();
        assert_eq!((rd(&mut r, RNIC_REG_ID), cfg(&mut r, 0), cfg(&mut r, 0x100)), (u32::MAX, u32::MAX, u32::MAX));
        assert!(r.link_down(), "configuration writes are dropped by the transport");
        let chunk = r.router.gate.enter();
        assert_eq!(chunk.err(), Some(crate::platform::mem::gate::Closed::LinkDown), "no DMA chunk passes the gate while the link is down");
        r.bar_write(0, RNIC_REG_SCRATCH, &9u32.to_le_bytes());
        fault(&mut r, "link up").unwrap();
        assert!(r.router.gate.enter().is_ok(), "the link is back: DMA again");
        assert_eq!(rd(&mut r, RNIC_REG_ID), ID_MAGIC);
        assert_eq!(rd(&mut r, RNIC_REG_SCRATCH), 0, "the function was reset");
        assert_eq!(cfg(&mut r, 0) & 0xffff, u32::from(crate::regs::pci_ids::VENDOR_ID));
        let s = r.stats();
        assert!(s.contains(&("FaultLinkDown", 1)) && s.contains(&("FaultLinkUp", 1)));
    }

    #[test]
    fn aer_errors_latch_status_devsta_and_report_async() {
        let mut r = rnic();
        let aer = r.config.extended_capability(EXT_CAP_ID_AER).unwrap();
        let pcie = r.config.pcie_capability().unwrap();
        assert!(fault(&mut r, "aer correctable").unwrap().contains("correctable"));
        assert_eq!(cfg(&mut r, aer + AER_COR_STATUS), 1 << pcie_fault::AER_COR_DEFAULT);
        assert_eq!(rd(&mut r, RNIC_REG_LAST_ERROR), ASYNC_ERR_AER << 24);
        fault(&mut r, "aer uncorrectable bit=18").unwrap();
        assert_eq!(cfg(&mut r, aer + AER_UNCOR_STATUS), 1 << 18);
        assert_eq!(cfg(&mut r, aer + AER_CAP_CONTROL) & 0x1f, 18, "First Error Pointer");
        r.config_mut().write(aer + AER_UNCOR_STATUS, &(1u32 << 18).to_le_bytes()).unwrap();
        fault(&mut r, "aer uncorrectable bit=12").unwrap();
        assert_eq!(cfg(&mut r, aer + AER_CAP_CONTROL) & 0x1f, 12, "the pointer is replaced, not OR-ed");
        fault(&mut r, "aer uncorrectable bit=18").unwrap();
        assert_eq!(cfg(&mut r, aer + AER_CAP_CONTROL) & 0x1f, 12, "only the first error sets it");
        r.config_mut().write(aer + AER_UNCOR_STATUS, &(1u32 << 12).to_le_bytes()).unwrap();
        assert_eq!(rd(&mut r, RNIC_REG_LAST_ERROR), ASYNC_ERR_AER << 24 | 2, "Malformed TLP is fatal by default");
        assert_eq!(cfg(&mut r, pcie + PCIE_DEVSTA) & 0b111, DEVSTA_CED | DEVSTA_NFED | DEVSTA_FED);
        // Status is write-one-to-clear for software.
        r.config_mut().write(aer + AER_UNCOR_STATUS, &(1u32 << 18).to_le_bytes()).unwrap();
        assert_eq!(cfg(&mut r, aer + AER_UNCOR_STATUS), 0);
        // A masked error is logged, not reported (Completion Timeout is masked by nobody;
        // Internal Error, bit 22, is masked by default).
        assert!(fault(&mut r, "aer uncorrectable bit=22").unwrap().contains("masked"));
        assert_eq!(rd(&mut r, RNIC_REG_LAST_ERROR), 0);
        assert_eq!(cfg(&mut r, aer + AER_UNCOR_STATUS), 1 << 22);
        assert!(fault(&mut r, "aer correctable bit=3").is_err());
    }

    #[test]
    fn a_timed_out_command_stays_busy_until_reset() {
        let mut r = rnic();
        fault(&mut r, "cmd-timeout").unwrap();
        r.bar_write(0, RNIC_REG_CMD, &(CMD_QUERY_QP << 24).to_le_bytes());
        assert_eq!(rd(&mut r, RNIC_REG_CMD_STATUS), CMD_BUSY);
        r.bar_write(0, RNIC_REG_CMD, &(CMD_QUERY_QP << 24).to_le_bytes());
        assert_eq!(rd(&mut r, RNIC_REG_CMD_STATUS), CMD_BUSY, "every later command too");
        r.bar_write(0, RNIC_REG_RESET, &(RESET_MAGIC as u32).to_le_bytes());
        r.bar_write(0, RNIC_REG_CMD, &(CMD_CREATE_CQ << 24).to_le_bytes());
        assert_eq!(rd(&mut r, RNIC_REG_CMD_STATUS), CMD_ERR_DMA, "runs again (no CQ table set)");
    }

    #[test]
    fn flr_required_survives_register_reset_but_not_flr() {
        let mut r = rnic();
        fault(&mut r, "flr-required").unwrap();
        let fatal = STATUS_FATAL | STATUS_FLR_REQUIRED;
        assert_eq!(u64::from(rd(&mut r, RNIC_REG_STATUS)) & fatal, fatal);
        assert_eq!(rd(&mut r, RNIC_REG_LAST_ERROR), ASYNC_ERR_FLR_REQUIRED << 24);
        r.bar_write(0, RNIC_REG_CMD, &(CMD_QUERY_QP << 24).to_le_bytes());
        assert_eq!(rd(&mut r, RNIC_REG_CMD_STATUS), CMD_ERR_FATAL);
        r.bar_write(0, RNIC_REG_RESET, &(RESET_MAGIC as u32).to_le_bytes());
        assert_eq!(u64::from(rd(&mut r, RNIC_REG_STATUS)) & fatal, fatal, "RNIC_REG_RESET does not recover");
        r.reset(); // what the transport does on FLR
        assert_eq!(u64::from(rd(&mut r, RNIC_REG_STATUS)) & fatal, 0);
        r.bar_write(0, RNIC_REG_CMD, &(CMD_CREATE_CQ << 24).to_le_bytes());
        assert_eq!(rd(&mut r, RNIC_REG_CMD_STATUS), CMD_ERR_DMA);
    }

    #[test]
    fn fatal_and_async_events_and_requests_for_other_functions() {
        let mut r = rnic();
        fault(&mut r, "async code=2 index=9").unwrap();
        assert_eq!(rd(&mut r, RNIC_REG_LAST_ERROR), ASYNC_ERR_QP << 24 | 9);
        fault(&mut r, "fatal").unwrap();
        assert_eq!(u64::from(rd(&mut r, RNIC_REG_STATUS)) & STATUS_FATAL, STATUS_FATAL);
        assert_eq!(rd(&mut r, RNIC_REG_LAST_ERROR), ASYNC_ERR_FATAL << 24);
        r.bar_write(0, RNIC_REG_RESET, &(RESET_MAGIC as u32).to_le_bytes());
        assert_eq!(u64::from(rd(&mut r, RNIC_REG_STATUS)) & STATUS_FATAL, 0);
        assert!(r.control("pcie dev=other link down").is_none(), "another function's request");
        assert!(fault(&mut r, "dev=r dma-read-fail count=2").unwrap().contains("armed dma-read-fail count=2"));
        let status: serde_json::Value = serde_json::from_str(&fault(&mut r, "status").unwrap()).unwrap();
        assert_eq!(status["armed"][0], "dma-read-fail count=2");
        assert_eq!(status["counters"]["fault_fatal"], 1);
        assert!(fault(&mut r, "bogus").is_err());
    }

    #[test]
    fn topology_faults_are_armed_with_the_seed() {
        let mut r = rnic();
        let nf = NodeFaults { pcie: vec!["poison count=3".into()], seed: 5, ..Default::default() };
        r.arm_faults(&nf).unwrap();
        assert_eq!(r.faults.rules().len(), 1);
        let bad = NodeFaults { pcie: vec!["link down".into()], ..Default::default() };
        assert!(r.arm_faults(&bad).is_err());
    }
}
