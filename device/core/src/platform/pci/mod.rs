//! PCI plumbing shared by the emulated functions: configuration space and capabilities.
pub mod caps;
pub mod config;
#[cfg(test)]
mod tests;
