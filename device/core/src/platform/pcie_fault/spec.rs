//! The text form of a PCIe-side fault (docs/faults.md): `<kind> [key=value ...]`, as the
//! control socket (`rnic-emu fault`) and a topology's `[node.faults] pcie = [...]` give it.
//! Parsing validates everything (numbers, ranges, probabilities) and never panics: the
//! text comes from the host user, but a bad request must still get a clear error.

use std::time::Duration;

/// Largest completion delay a fault may ask for.
pub const MAX_DELAY: Duration = Duration::from_secs(10);

/// A fault kind that is armed and fires on later device activity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Armed {
    /// DMA reads (WQE fetch, payload, context, MTT) fail.
    DmaReadFail,
    /// DMA writes (payload, CQE, context write-back) fail.
    DmaWriteFail,
    /// DMA reads return poisoned data: the bytes arrive corrupted and the error is flagged.
    Poison,
    /// CQEs are held back for a while.
    CqeDelay,
    /// The device attempts to write a CQE twice.
    CqeDuplicate,
    /// MSI-X messages are lost on the way to the host.
    MsiLost,
    /// The next command never completes: CMD_STATUS stays CMD_BUSY until a reset.
    CmdTimeout,
}

/// A fault that happens at once when it is requested.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Now {
    /// A spurious MSI-X message on `vector`.
    MsiSpurious { vector: u16 },
    /// An asynchronous error event: RNIC_REG_LAST_ERROR = code << 24 | index, vector 0.
    Async { code: u32, index: u32 },
    /// The engine fails as after an internal error (STATUS_FATAL, ASYNC_ERR_FATAL).
    Fatal,
    /// An AER error: `bit` of the correctable or uncorrectable status register.
    Aer { uncorrectable: bool, bit: u8 },
    /// The link goes down (`false`) or comes back (`true`).
    Link { up: bool },
    /// The function needs a Function Level Reset; RNIC_REG_RESET no longer recovers it.
    FlrRequired,
}

/// An armed fault: what, how often, where, with which probability.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rule {
    pub kind: Armed,
    /// Events left to disturb (None: every matching event until cleared).
    pub count: Option<u64>,
    /// Only accesses overlapping [start, end) (DMA kinds).
    pub range: Option<(u64, u64)>,
    /// Probability that a matching event is disturbed (seeded; 1.0 by default).
    pub prob: f64,
    /// Only this MSI-X vector (msi-lost).
    pub vector: Option<u16>,
    /// How long CQEs are held (cqe-delay).
    pub delay: Duration,
    /// cqe-duplicate: write the duplicate into the next free slot (a device without the
    /// duplicate check) instead of detecting and dropping it.
    pub deliver: bool,
}

/// A parsed request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    Arm(Rule),
    Now(Now),
    /// Disarm every armed fault (the link, FLR-required and stuck-command states stay).
    Clear,
    /// Reseed the generator behind `prob=`.
    Seed(u64),
}

/// Fault kinds and their arguments, for error messages and `--help`.
pub const KINDS: &str = "dma-read-fail|dma-write-fail|poison [count=N|always] [addr=A len=L] [prob=P]; \
cqe-delay ms=N [count=N]; cqe-duplicate [count=N] [deliver]; msi-lost [count=N] [vector=V] [prob=P]; \
msi-spurious [vector=V]; cmd-timeout; async [code=C] [index=I]; fatal; \
aer correctable|uncorrectable [bit=B]; link down|up; flr-required; clear; seed S";

fn num(key: &str, v: &str) -> Result<u64, String> {
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    parsed.map_err(|_| format!("{key}={v}: not a number"))
}

/// Parses one fault request (`words`: the kind, then its arguments).
pub fn parse<'a>(mut words: impl Iterator<Item = &'a str>) -> Result<Fault, String> {
    let kind = words.next().ok_or_else(|| format!("expected a fault: {KINDS}"))?;
    let args: Vec<&str> = words.collect();
    let armed = match kind {
        "dma-read-fail" => Some(Armed::DmaReadFail),
        "dma-write-fail" => Some(Armed::DmaWriteFail),
        "poison" => Some(Armed::Poison),
        "cqe-delay" => Some(Armed::CqeDelay),
        "cqe-duplicate" => Some(Armed::CqeDuplicate),
        "msi-lost" => Some(Armed::MsiLost),
        "cmd-timeout" => Some(Armed::CmdTimeout),
        _ => None,
    };
    if let Some(kind) = armed {
        return parse_rule(kind, &args).map(Fault::Arm);
    }
    let (mut vector, mut code, mut index) = (None, None, 0u32);
    let mut flags = Vec::new();
    for a in &args {
        match a.split_once('=') {
            Some(("vector", v)) => vector = Some(u16::try_from(num("vector", v)?).map_err(|_| format!("vector={v}: too large"))?),
            Some(("code", v)) => code = Some(u32::try_from(num("code", v)?).ok().filter(|c| (1..=0xff).contains(c)).ok_or(format!("code={v}: 1..=255"))?),
            Some(("index", v)) => index = u32::try_from(num("index", v)?).ok().filter(|i| *i <= 0xff_ffff).ok_or(format!("index={v}: 24 bits"))?,
            Some(("bit", v)) => flags.push(("bit", num("bit", v)?)),
            Some((k, _)) => return Err(format!("{kind}: unknown argument '{k}'")),
            None => flags.push((a, 0)),
        }
    }
    let given: Vec<&str> = args.iter().filter_map(|a| a.split_once('=').map(|(k, _)| k)).collect();
    let keys: &[&str] = match kind {
        "msi-spurious" => &["vector"],
        "async" => &["code", "index"],
        "aer" => &["bit"],
        _ => &[],
    };
    if let Some(k) = given.iter().find(|k| !keys.contains(k)) {
        return Err(format!("{kind}: '{k}' is not an argument of this fault"));
    }
    let words: Vec<&str> = flags.iter().filter(|f| f.0 != "bit").map(|f| f.0).collect();
    let bit = flags.iter().find(|f| f.0 == "bit").map(|f| f.1);
    let only = |allowed: &[&str]| -> Result<(), String> {
        match words.iter().find(|w| !allowed.contains(w)) {
            Some(w) => Err(format!("{kind}: unexpected '{w}'")),
            None => Ok(()),
        }
    };
    let now = match kind {
        "msi-spurious" => {
            only(&[])?;
            Now::MsiSpurious { vector: vector.unwrap_or(0) }
        }
        "async" => {
            only(&[])?;
            Now::Async { code: code.unwrap_or(crate::contract::abi::ASYNC_ERR_INJECTED), index }
        }
        "fatal" => {
            only(&[])?;
            Now::Fatal
        }
        "flr-required" => {
            only(&[])?;
            Now::FlrRequired
        }
        "aer" => {
            let uncorrectable = match words.as_slice() {
                ["correctable"] => false,
                ["uncorrectable"] => true,
                _ => return Err("aer: expected 'correctable' or 'uncorrectable'".into()),
            };
            let default = if uncorrectable { super::AER_UNCOR_DEFAULT } else { super::AER_COR_DEFAULT };
            let bit = bit.unwrap_or(u64::from(default));
            let valid = if uncorrectable { super::AER_UNCOR_BITS } else { super::AER_COR_BITS };
            if bit > 31 || valid & (1 << bit) == 0 {
                return Err(format!("aer: bit {bit} is not a defined {} error", if uncorrectable { "uncorrectable" } else { "correctable" }));
            }
            Now::Aer { uncorrectable, bit: bit as u8 }
        }
        "link" => match words.as_slice() {
            ["down"] => Now::Link { up: false },
            ["up"] => Now::Link { up: true },
            _ => return Err("link: expected 'down' or 'up'".into()),
        },
        "clear" => return Ok(Fault::Clear),
        "seed" => return args.first().map(|s| num("seed", s)).transpose()?.map(Fault::Seed).ok_or("seed: expected a number".into()),
        other => return Err(format!("unknown fault '{other}': {KINDS}")),
    };
    Ok(Fault::Now(now))
}

fn parse_rule(kind: Armed, args: &[&str]) -> Result<Rule, String> {
    let mut r = Rule { kind, count: Some(1), range: None, prob: 1.0, vector: None, delay: Duration::ZERO, deliver: false };
    let (mut addr, mut len) = (None, None);
    let dma = matches!(kind, Armed::DmaReadFail | Armed::DmaWriteFail | Armed::Poison);
    for a in args {
        let bad = || format!("{a}: not an argument of this fault");
        match a.split_once('=') {
            Some(("count", "always")) => r.count = None,
            Some(("count", v)) => r.count = Some(num("count", v)?).filter(|c| *c > 0).map(Some).ok_or("count must be at least 1 (or 'always')")?,
            Some(("addr", v)) if dma => addr = Some(num("addr", v)?),
            Some(("len", v)) if dma => len = Some(num("len", v)?),
            Some(("prob", v)) if kind != Armed::CmdTimeout => {
                r.prob = v.parse::<f64>().ok().filter(|p| (0.0..=1.0).contains(p)).ok_or(format!("prob={v}: a probability 0..=1"))?
            }
            Some(("vector", v)) if kind == Armed::MsiLost => r.vector = Some(u16::try_from(num("vector", v)?).map_err(|_| bad())?),
            Some(("ms", v)) if kind == Armed::CqeDelay => {
                r.delay = Duration::from_millis(num("ms", v)?);
                if r.delay > MAX_DELAY || r.delay.is_zero() {
                    return Err(format!("ms={v}: 1..={}", MAX_DELAY.as_millis()));
                }
            }
            None if *a == "deliver" && kind == Armed::CqeDuplicate => r.deliver = true,
            _ => return Err(bad()),
        }
    }
    match (addr, len) {
        (Some(a), Some(l)) => {
            let end = a.checked_add(l).filter(|_| l > 0).ok_or(format!("addr={a:#x} len={l}: empty or wrapping range"))?;
            r.range = Some((a, end));
        }
        (None, None) => {}
        _ => return Err("addr and len go together".into()),
    }
    if kind == Armed::CqeDelay && r.delay.is_zero() {
        return Err("cqe-delay needs ms=N".into());
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Fault, String> {
        parse(s.split_whitespace())
    }

    #[test]
    fn armed_faults_take_their_arguments_and_refuse_others() {
        let Ok(Fault::Arm(r)) = p("dma-write-fail count=3 addr=0x1000 len=4096 prob=0.5") else { panic!() };
        assert_eq!((r.kind, r.count, r.range, r.prob), (Armed::DmaWriteFail, Some(3), Some((0x1000, 0x2000)), 0.5));
        let Ok(Fault::Arm(r)) = p("msi-lost count=always vector=2") else { panic!() };
        assert_eq!((r.count, r.vector), (None, Some(2)));
        let Ok(Fault::Arm(r)) = p("cqe-delay ms=250") else { panic!() };
        assert_eq!(r.delay, Duration::from_millis(250));
        let Ok(Fault::Arm(r)) = p("cqe-duplicate deliver") else { panic!() };
        assert!(r.deliver);
        for bad in [
            "dma-read-fail count=0",
            "dma-read-fail addr=1",
            "dma-read-fail addr=0xffffffffffffffff len=2",
            "poison prob=2",
            "cqe-delay",
            "cqe-delay ms=100000",
            "msi-lost ms=3",
            "cmd-timeout prob=0.5",
            "dma-read-fail vector=1",
            "nope",
            "",
        ] {
            assert!(p(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn immediate_faults_parse_with_defaults() {
        assert_eq!(p("link down"), Ok(Fault::Now(Now::Link { up: false })));
        assert_eq!(p("aer correctable"), Ok(Fault::Now(Now::Aer { uncorrectable: false, bit: super::super::AER_COR_DEFAULT })));
        assert_eq!(p("aer uncorrectable bit=18"), Ok(Fault::Now(Now::Aer { uncorrectable: true, bit: 18 })));
        assert!(p("aer uncorrectable bit=1").is_err(), "bit 1 is reserved");
        assert_eq!(p("async code=2 index=7"), Ok(Fault::Now(Now::Async { code: 2, index: 7 })));
        assert!(p("async code=0").is_err() && p("async index=0x1000000").is_err());
        assert_eq!(p("msi-spurious vector=3"), Ok(Fault::Now(Now::MsiSpurious { vector: 3 })));
        assert_eq!(p("seed 42"), Ok(Fault::Seed(42)));
        assert!(p("link sideways").is_err() && p("fatal now").is_err());
        assert!(p("aer correctable vector=3").is_err() && p("link down bit=2").is_err() && p("fatal code=4").is_err());
    }
}
