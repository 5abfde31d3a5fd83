//! A small IPv4/IPv6 CIDR type for `--cluster-cidr` and `--service-cidr`.
//!
//! Owns parsing, containment, overlap and "n-th address" arithmetic; nothing else (no network,
//! no files). Like Go's `net.ParseCIDR`, host bits in the input are masked off, so
//! `10.43.7.1/16` means `10.43.0.0/16`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP network: a base address with its host bits cleared and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a string is not a CIDR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error("expected <address>/<prefix length>, e.g. 10.42.0.0/16")]
    MissingPrefix,
    #[error("{0:?} is not an IP address")]
    BadAddress(String),
    #[error("{0:?} is not a prefix length")]
    BadPrefix(String),
    #[error("prefix length {prefix} is larger than {max} for an {family} address")]
    PrefixTooLong {
        prefix: u32,
        max: u8,
        family: &'static str,
    },
    #[error("only one CIDR is supported (dual-stack lists are not implemented yet)")]
    DualStack,
}

impl Cidr {
    /// Builds a CIDR from an address and prefix length, masking the host bits.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, CidrError> {
        let max = max_prefix(addr);
        if prefix > max {
            return Err(CidrError::PrefixTooLong {
                prefix: u32::from(prefix),
                max,
                family: family(addr),
            });
        }
        let bits = to_bits(addr) & mask(max, prefix);
        Ok(Self {
            network: from_bits(addr, bits),
            prefix,
        })
    }

    /// The network (first) address.
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.prefix
    }

    /// True for an IPv4 network.
    pub fn is_ipv4(&self) -> bool {
        self.network.is_ipv4()
    }

    /// Whether `ip` lies inside this network (an address of the other family never does).
    pub fn contains(&self, ip: IpAddr) -> bool {
        if ip.is_ipv4() != self.network.is_ipv4() {
            return false;
        }
        let m = mask(max_prefix(ip), self.prefix);
        to_bits(ip) & m == to_bits(self.network)
    }

    /// Whether the two networks share at least one address.
    pub fn overlaps(&self, other: &Cidr) -> bool {
        self.contains(other.network) || other.contains(self.network)
    }

    /// The `n`-th address of the network (`nth(0)` is the network address, `nth(1)` the first
    /// usable one, e.g. `10.43.0.1` for the service CIDR), or `None` past the end.
    pub fn nth(&self, n: u128) -> Option<IpAddr> {
        let host_bits = u32::from(max_prefix(self.network) - self.prefix);
        if host_bits < 128 && n >> host_bits != 0 {
            return None;
        }
        Some(from_bits(self.network, to_bits(self.network) | n))
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.contains(',') {
            return Err(CidrError::DualStack);
        }
        let (addr, prefix) = s.trim().split_once('/').ok_or(CidrError::MissingPrefix)?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| CidrError::BadAddress(addr.to_string()))?;
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(CidrError::BadPrefix(prefix.to_string()));
        }
        let max = max_prefix(addr);
        let prefix_num: u32 = prefix.parse().map_err(|_| CidrError::PrefixTooLong {
            prefix: u32::MAX,
            max,
            family: family(addr),
        })?;
        let prefix = u8::try_from(prefix_num).ok().filter(|p| *p <= max).ok_or(
            CidrError::PrefixTooLong {
                prefix: prefix_num,
                max,
                family: family(addr),
            },
        )?;
        Cidr::new(addr, prefix)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

fn family(addr: IpAddr) -> &'static str {
    if addr.is_ipv4() { "IPv4" } else { "IPv6" }
}

fn max_prefix(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

/// Network mask for `prefix` in an address space of `width` bits, right-aligned in a u128.
fn mask(width: u8, prefix: u8) -> u128 {
    let all: u128 = if width == 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    };
    let host_bits = u32::from(width - prefix);
    if host_bits >= 128 {
        0
    } else {
        all & !((1u128 << host_bits) - 1)
    }
}

fn to_bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn from_bits(family_of: IpAddr, bits: u128) -> IpAddr {
    match family_of {
        // Callers only pass values inside the 32-bit space for IPv4 networks.
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(bits as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(bits)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("test address")
    }

    #[test]
    fn parses_and_masks_host_bits() {
        let c: Cidr = "10.43.7.1/16".parse().expect("valid");
        assert_eq!(c.to_string(), "10.43.0.0/16");
        assert_eq!(c.prefix_len(), 16);
        let c6: Cidr = "fd00:42::1/56".parse().expect("valid");
        assert_eq!(c6.to_string(), "fd00:42::/56");
        assert_eq!("0.0.0.0/0".parse::<Cidr>().map(|c| c.prefix_len()), Ok(0));
        assert_eq!("::/0".parse::<Cidr>().map(|c| c.prefix_len()), Ok(0));
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!("10.42.0.0".parse::<Cidr>(), Err(CidrError::MissingPrefix));
        assert!(matches!(
            "10.42.0.0/33".parse::<Cidr>(),
            Err(CidrError::PrefixTooLong {
                prefix: 33,
                max: 32,
                ..
            })
        ));
        assert!(matches!(
            "::/129".parse::<Cidr>(),
            Err(CidrError::PrefixTooLong { prefix: 129, .. })
        ));
        assert!(matches!(
            "10.42.0.0/99999999999".parse::<Cidr>(),
            Err(CidrError::PrefixTooLong { .. })
        ));
        assert!(matches!(
            "10.42.0/16".parse::<Cidr>(),
            Err(CidrError::BadAddress(_))
        ));
        assert!(matches!(
            "10.42.0.0/-1".parse::<Cidr>(),
            Err(CidrError::BadPrefix(_))
        ));
        assert!(matches!(
            "10.42.0.0/".parse::<Cidr>(),
            Err(CidrError::BadPrefix(_))
        ));
        assert_eq!(
            "10.42.0.0/16,fd00::/56".parse::<Cidr>(),
            Err(CidrError::DualStack)
        );
    }

    #[test]
    fn contains_and_overlaps() {
        let c: Cidr = "10.43.0.0/16".parse().expect("valid");
        assert!(c.contains(ip("10.43.0.10")));
        assert!(c.contains(ip("10.43.255.255")));
        assert!(!c.contains(ip("10.44.0.0")));
        assert!(!c.contains(ip("::1")));
        let all: Cidr = "0.0.0.0/0".parse().expect("valid");
        assert!(all.contains(ip("255.255.255.255")));
        let other: Cidr = "10.42.0.0/16".parse().expect("valid");
        assert!(!c.overlaps(&other));
        let wide: Cidr = "10.0.0.0/8".parse().expect("valid");
        assert!(wide.overlaps(&c) && c.overlaps(&wide));
    }

    #[test]
    fn nth_address() {
        let c: Cidr = "10.43.0.0/16".parse().expect("valid");
        assert_eq!(c.nth(0), Some(ip("10.43.0.0")));
        assert_eq!(c.nth(1), Some(ip("10.43.0.1")));
        assert_eq!(c.nth(10), Some(ip("10.43.0.10")));
        assert_eq!(c.nth(65535), Some(ip("10.43.255.255")));
        assert_eq!(c.nth(65536), None);
        let host: Cidr = "10.1.2.3/32".parse().expect("valid");
        assert_eq!(host.nth(0), Some(ip("10.1.2.3")));
        assert_eq!(host.nth(1), None);
        let v6: Cidr = "fd00:43::/112".parse().expect("valid");
        assert_eq!(v6.nth(1), Some(ip("fd00:43::1")));
        let all6: Cidr = "::/0".parse().expect("valid");
        assert_eq!(
            all6.nth(u128::MAX),
            Some(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"))
        );
    }
}
