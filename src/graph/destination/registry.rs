//! Which addresses are internal: every entry of the IANA IPv4 and IPv6
//! Special-Purpose Address Registries whose "Globally Reachable" is False
//! or N/A, the deprecated site-local `fec0::/10`, multicast, and IPv6
//! outside the global unicast space `2000::/3` (reserved by the IETF).
//! IPv6 addresses that embed an IPv4 address are judged by that address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a registry entry says about the addresses inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rule {
    /// Not a destination for the fetcher; the category name.
    Internal(&'static str),
    /// Globally reachable: a more specific entry inside an internal block.
    Global,
    /// An IPv6 form that carries an IPv4 address, judged by that address.
    Embeds(Form),
}

/// An IPv6 form that carries an IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `::ffff:0:0/96`, the IPv4 address in the last 32 bits.
    Mapped,
    /// `::/96` (but `::` and `::1`), the IPv4 address in the last 32 bits.
    Compatible,
    /// `64:ff9b::/96`, the IPv4 address in the last 32 bits.
    Nat64,
    /// `2002::/16`, the IPv4 address in bits 16 to 48.
    SixToFour,
    /// `2001::/32`: the server's IPv4 address in bits 32 to 64, the
    /// client's in the last 32 bits, inverted.
    Teredo,
}

impl Form {
    fn name(self) -> &'static str {
        match self {
            Form::Mapped => "an IPv4-mapped",
            Form::Compatible => "an IPv4-compatible",
            Form::Nat64 => "a NAT64",
            Form::SixToFour => "a 6to4",
            Form::Teredo => "a Teredo",
        }
    }

    /// The IPv4 addresses `ip` carries in this form.
    fn embedded(self, ip: Ipv6Addr) -> Vec<Ipv4Addr> {
        let bits = ip.to_bits();
        let low = Ipv4Addr::from_bits(bits as u32);
        match self {
            Form::Mapped => ip.to_ipv4_mapped().into_iter().collect(),
            Form::Compatible | Form::Nat64 => vec![low],
            Form::SixToFour => vec![Ipv4Addr::from_bits((bits >> 80) as u32)],
            Form::Teredo => vec![
                Ipv4Addr::from_bits((bits >> 64) as u32),
                Ipv4Addr::from_bits(!(bits as u32)),
            ],
        }
    }
}

/// Why an address is not a destination: its category, and for an IPv6
/// address that embeds an internal IPv4 address, the form and that address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Internal {
    /// The registry entry's category (`loopback`, `private-use`, ...).
    pub category: &'static str,
    /// The embedding form and the internal IPv4 address it carries.
    pub embedded: Option<(Form, Ipv4Addr)>,
}

impl fmt::Display for Internal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((form, v4)) = self.embedded {
            write!(f, "{} address that embeds {v4}, ", form.name())?;
        }
        write!(f, "a {} address", self.category)
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8) -> u32 {
    Ipv4Addr::new(a, b, c, d).to_bits()
}

const fn v6(s: [u16; 8]) -> u128 {
    Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]).to_bits()
}

/// The IPv4 entries, the more specific before the blocks that hold them:
/// network, prefix length, rule.
pub(super) const V4: &[(u32, u32, Rule)] = {
    use Rule::{Global, Internal as I};
    &[
        (v4(0, 0, 0, 0), 32, I("this host on this network")),
        (v4(0, 0, 0, 0), 8, I("this network")),
        (v4(10, 0, 0, 0), 8, I("private-use")),
        (v4(100, 64, 0, 0), 10, I("shared address space (CGN)")),
        (v4(127, 0, 0, 0), 8, I("loopback")),
        (v4(169, 254, 0, 0), 16, I("link-local")),
        (v4(172, 16, 0, 0), 12, I("private-use")),
        (v4(192, 0, 0, 0), 29, I("IPv4 service continuity prefix")),
        (v4(192, 0, 0, 8), 32, I("IPv4 dummy address")),
        (v4(192, 0, 0, 9), 32, Global),
        (v4(192, 0, 0, 10), 32, Global),
        (v4(192, 0, 0, 170), 32, I("NAT64/DNS64 discovery")),
        (v4(192, 0, 0, 171), 32, I("NAT64/DNS64 discovery")),
        (v4(192, 0, 0, 0), 24, I("IETF protocol assignments")),
        (v4(192, 0, 2, 0), 24, I("documentation (TEST-NET-1)")),
        (v4(192, 88, 99, 0), 24, I("6to4 relay anycast (deprecated)")),
        (v4(192, 168, 0, 0), 16, I("private-use")),
        (v4(198, 18, 0, 0), 15, I("benchmarking")),
        (v4(198, 51, 100, 0), 24, I("documentation (TEST-NET-2)")),
        (v4(203, 0, 113, 0), 24, I("documentation (TEST-NET-3)")),
        (v4(224, 0, 0, 0), 4, I("multicast")),
        (v4(255, 255, 255, 255), 32, I("limited broadcast")),
        (v4(240, 0, 0, 0), 4, I("reserved")),
    ]
};

/// The IPv6 entries, the more specific before the blocks that hold them:
/// network, prefix length, rule. What no entry holds is internal unless it
/// is in `2000::/3`.
pub(super) const V6: &[(u128, u32, Rule)] = {
    use Rule::{Embeds, Global, Internal as I};
    &[
        (v6([0, 0, 0, 0, 0, 0, 0, 0]), 128, I("unspecified")),
        (v6([0, 0, 0, 0, 0, 0, 0, 1]), 128, I("loopback")),
        (v6([0, 0, 0, 0, 0, 0xffff, 0, 0]), 96, Embeds(Form::Mapped)),
        (v6([0, 0, 0, 0, 0, 0, 0, 0]), 96, Embeds(Form::Compatible)),
        (
            v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0]),
            96,
            Embeds(Form::Nat64),
        ),
        (
            v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0]),
            48,
            I("NAT64 local-use"),
        ),
        (v6([0x100, 0, 0, 0, 0, 0, 0, 0]), 64, I("discard-only")),
        (v6([0x100, 0, 0, 1, 0, 0, 0, 0]), 64, I("dummy IPv6 prefix")),
        (v6([0x2001, 0, 0, 0, 0, 0, 0, 0]), 32, Embeds(Form::Teredo)),
        (v6([0x2001, 1, 0, 0, 0, 0, 0, 1]), 128, Global),
        (v6([0x2001, 1, 0, 0, 0, 0, 0, 2]), 128, Global),
        (v6([0x2001, 1, 0, 0, 0, 0, 0, 3]), 128, Global),
        (v6([0x2001, 2, 0, 0, 0, 0, 0, 0]), 48, I("benchmarking")),
        (v6([0x2001, 3, 0, 0, 0, 0, 0, 0]), 32, Global),
        (v6([0x2001, 4, 0x112, 0, 0, 0, 0, 0]), 48, Global),
        (
            v6([0x2001, 0x10, 0, 0, 0, 0, 0, 0]),
            28,
            I("ORCHID (deprecated)"),
        ),
        (v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0]), 28, Global),
        (v6([0x2001, 0x30, 0, 0, 0, 0, 0, 0]), 28, Global),
        (
            v6([0x2001, 0, 0, 0, 0, 0, 0, 0]),
            23,
            I("IETF protocol assignments"),
        ),
        (
            v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0]),
            32,
            I("documentation"),
        ),
        (
            v6([0x2002, 0, 0, 0, 0, 0, 0, 0]),
            16,
            Embeds(Form::SixToFour),
        ),
        (v6([0x3fff, 0, 0, 0, 0, 0, 0, 0]), 20, I("documentation")),
        (
            v6([0x5f00, 0, 0, 0, 0, 0, 0, 0]),
            16,
            I("segment routing (SRv6) SIDs"),
        ),
        (v6([0xfc00, 0, 0, 0, 0, 0, 0, 0]), 7, I("unique local")),
        (v6([0xfe80, 0, 0, 0, 0, 0, 0, 0]), 10, I("link-local")),
        (
            v6([0xfec0, 0, 0, 0, 0, 0, 0, 0]),
            10,
            I("site-local (deprecated)"),
        ),
        (v6([0xff00, 0, 0, 0, 0, 0, 0, 0]), 8, I("multicast")),
        (v6([0x2000, 0, 0, 0, 0, 0, 0, 0]), 3, Global),
    ]
};

/// The rule of the first entry of `table` that holds `ip` (`bits` wide).
fn lookup<T>(table: &[(T, u32, Rule)], ip: T, bits: u32) -> Option<Rule>
where
    T: Copy + std::ops::BitXor<Output = T> + std::ops::Shr<u32, Output = T> + PartialEq + From<u8>,
{
    table.iter().find_map(|&(net, len, rule)| {
        let differ = if len == 0 {
            T::from(0)
        } else {
            (ip ^ net) >> (bits - len)
        };
        (differ == T::from(0)).then_some(rule)
    })
}

fn internal_v4(ip: Ipv4Addr) -> Option<&'static str> {
    match lookup(V4, ip.to_bits(), 32)? {
        Rule::Internal(category) => Some(category),
        Rule::Global | Rule::Embeds(_) => None,
    }
}

/// Why `ip` is not a destination for the fetcher, or `None` for a globally
/// reachable address.
#[must_use]
pub fn internal_category(ip: IpAddr) -> Option<Internal> {
    let plain = |category| Internal {
        category,
        embedded: None,
    };
    match ip {
        IpAddr::V4(ip) => internal_v4(ip).map(plain),
        IpAddr::V6(ip) => match lookup(V6, ip.to_bits(), 128) {
            Some(Rule::Internal(category)) => Some(plain(category)),
            Some(Rule::Global) => None,
            Some(Rule::Embeds(form)) => form.embedded(ip).into_iter().find_map(|v4| {
                internal_v4(v4).map(|category| Internal {
                    category,
                    embedded: Some((form, v4)),
                })
            }),
            None => Some(plain("reserved by the IETF")),
        },
    }
}
